"""Infrastructure faults under one triggerer: the broker restarts, the database refuses
a random fraction of batches, the DLQ topic disappears.

Each uses the e2e watcher module (``everything`` keeps all, ``mirror`` too,
``picky`` rejects ids ending in 07; ``mirror`` and ``picky`` are batch filters, so each
fault hits both kinds of watcher) and reads its verdict from the broker and
PostgreSQL only. Invariants that must hold *during* the fault (commits never
past what is persisted, never past a rejected message whose dead letter is not
delivered) are sampled on a thread while it lasts.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic
from faultkit import (
    DeadLetter,
    Figures,
    Size,
    dead_letters,
    duplicates,
    log_lines,
    wait_committed_end,
)
from sampler import Sampler
from streams import committed, create_schema, event_ids, events, persisted_prefix, produce
from triggerer import ORDERS, Triggerer, until, write_config

PARTITIONS = 6


def _start(tmp_path: Path, pg_url: str, connection: dict[str, Any],
           triggerers: Callable[..., Triggerer], topic: str, dlq: str | None,
           watchers: str) -> Triggerer:
    create_schema(pg_url)
    config = write_config(tmp_path / "sharedstream.toml", database_url=pg_url,
                          connection=connection)
    env = {"E2E_TOPIC": topic, "E2E_DLQ": dlq or "", "E2E_WATCHERS": watchers}
    process = triggerers(config, ORDERS, env=env).start()
    process.wait_ready()
    return process


def _exactly_once(pg_url: str, watcher: str, expected: set[int]) -> tuple[int, int]:
    """(lost, duplicates) of ``watcher``'s events against the ids it should have kept."""
    found = event_ids(events(pg_url), watcher)
    return len(expected - set(found)), sum(n - 1 for n in found.values())


def test_broker_restart_mid_stream_reconnects_unready_while_down_loses_nothing(
        kafka_broker: Any, pg_url: str, kafka_bootstrap: str,
        create_topic: Callable[..., str], connection: dict[str, Any],
        triggerers: Callable[..., Triggerer], tmp_path: Path, size: Size,
        figures: Figures) -> None:
    count = size.pick(4_000, 40_000)
    topic = create_topic("restart", partitions=PARTITIONS)
    dlq = create_topic("restart-dlq")
    process = _start(tmp_path, pg_url, connection, triggerers, topic, dlq, "everything,picky")
    produce(kafka_bootstrap, topic, range(count // 2), PARTITIONS)
    restarted = threading.Thread(target=kafka_broker.restart)
    restarted.start()
    # The broker takes seconds to come back (a JVM): readiness must drop meanwhile. What
    # the condition saw is recorded by the condition, not read again after the wait.
    unready: list[bool] = []

    def unready_or_back() -> bool:
        if process.get("/readyz")[0] == 503:
            unready.append(True)
            return True
        return not restarted.is_alive()

    until(unready_or_back, "/readyz 503 or the restart's end", 120, interval=0.1)
    unready_seen = bool(unready)
    # Traffic while the broker is down: the producer buffers it until the broker is back.
    failed: list[BaseException] = []

    def send_while_down() -> None:
        try:
            produce(kafka_bootstrap, topic, range(count // 2, 3 * count // 4), PARTITIONS)
        except BaseException as exc:  # reported below: a thread's exception is not a failure
            failed.append(exc)

    during = threading.Thread(target=send_while_down)
    during.start()
    restarted.join(120)
    back = time.monotonic()
    process.wait_ready(120)
    recovered = time.monotonic() - back
    during.join(120)
    assert not during.is_alive() and not failed, f"traffic sent while down: {failed}"
    produce(kafka_bootstrap, topic, range(3 * count // 4, count), PARTITIONS)
    wait_committed_end(kafka_bootstrap, f"{connection['group.id']}.{topic}", topic,
                       PARTITIONS, size.pick(120, 600))
    rejected = {n for n in range(count) if n % 100 == 7}
    lost_all, dup_all = _exactly_once(pg_url, "everything", set(range(count)))
    lost_picky, dup_picky = _exactly_once(pg_url, "picky", set(range(count)) - rejected)
    records = dead_letters(kafka_bootstrap, dlq)
    missing_dlq = rejected - {r.partition + PARTITIONS * r.offset for r in records}
    figures.record("broker restart mid-stream", messages=count, faults=1,
                   lost=lost_all + lost_picky + len(missing_dlq),
                   duplicates=dup_all + dup_picky, recover_seconds=recovered,
                   unready_while_down=unready_seen,
                   dlq_duplicate_records=duplicates(r.identity for r in records))
    assert unready_seen, "/readyz never reported the broker down"
    assert (lost_all, dup_all, lost_picky, dup_picky) == (0, 0, 0, 0)
    assert missing_dlq == set()
    assert process.running()


FAULT_SQL = """
CREATE SEQUENCE injected_faults;
CREATE FUNCTION inject_fault() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF random() < {rate} THEN
        PERFORM nextval('injected_faults');  -- not rolled back with the failing batch
        RAISE EXCEPTION 'injected persistence fault' USING ERRCODE = '40001';
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER inject_fault BEFORE INSERT ON asset_event
    FOR EACH STATEMENT EXECUTE FUNCTION inject_fault();
"""


def test_random_persistence_failures_are_held_and_retried_never_committed_past(
        pg_url: str, kafka_bootstrap: str, create_topic: Callable[..., str],
        connection: dict[str, Any], triggerers: Callable[..., Triggerer], tmp_path: Path,
        size: Size, figures: Figures) -> None:
    """A statement trigger fails 20 % of event inserts, i.e. of unit-of-work batches (one
    insert each): a real PostgreSQL error, no seam in the product."""
    count = size.pick(5_000, 50_000)
    topic = create_topic("dbfaults", partitions=PARTITIONS)
    create_schema(pg_url)
    engine = sa.create_engine(pg_url)
    with engine.begin() as db:
        db.exec_driver_sql(FAULT_SQL.replace("{rate}", "0.2"))
    group = f"{connection['group.id']}.{topic}"

    def commits_within_persisted() -> list[str]:
        # Committed first, events second: a commit seen must be covered by events seen later.
        offsets = committed(kafka_bootstrap, group, topic, PARTITIONS)
        prefix = persisted_prefix(events(pg_url), ("everything", "mirror"), PARTITIONS)
        return [f"partition {p}: committed {offsets[p]} > persisted prefix {prefix[p]}"
                for p in range(PARTITIONS) if offsets[p] > prefix[p]]

    process = _start(tmp_path, pg_url, connection, triggerers, topic, None, "everything,mirror")
    with Sampler(commits_within_persisted) as sampler:
        produce(kafka_bootstrap, topic, range(count), PARTITIONS)
        began = time.monotonic()
        wait_committed_end(kafka_bootstrap, group, topic, PARTITIONS, size.pick(120, 900))
    with engine.connect() as db:
        faults = int(db.exec_driver_sql("SELECT last_value FROM injected_faults").scalar_one())
    engine.dispose()
    lost_a, dup_a = _exactly_once(pg_url, "everything", set(range(count)))
    lost_b, dup_b = _exactly_once(pg_url, "mirror", set(range(count)))
    figures.record("persistence failures (20 % of batches)", messages=count, faults=faults,
                   lost=lost_a + lost_b, duplicates=dup_a + dup_b,
                   recover_seconds=time.monotonic() - began, offset_samples=sampler.samples,
                   commits_past_persisted=len(sampler.violations))
    assert faults > 0
    assert sampler.violations == [] and sampler.samples > 0
    assert (lost_a, dup_a, lost_b, dup_b) == (0, 0, 0, 0)
    assert process.running()


def _topic_exists(admin: AdminClient, name: str) -> bool:
    return name in admin.list_topics(timeout=10).topics


def test_dlq_topic_deleted_holds_rejected_messages_until_it_returns(
        kafka_admin: AdminClient, pg_url: str, kafka_bootstrap: str,
        create_topic: Callable[..., str], connection: dict[str, Any],
        triggerers: Callable[..., Triggerer], tmp_path: Path, size: Size,
        figures: Figures) -> None:
    first = size.pick(1_200, 6_000)
    count = 2 * first
    topic = create_topic("dlqgone", partitions=PARTITIONS)
    dlq = create_topic("dlqgone-dlq")
    group = f"{connection['group.id']}.{topic}"
    process = _start(tmp_path, pg_url, connection, triggerers, topic, dlq, "everything,picky")
    produce(kafka_bootstrap, topic, range(first), PARTITIONS)
    wait_committed_end(kafka_bootstrap, group, topic, PARTITIONS, 120)
    kafka_admin.delete_topics([dlq], operation_timeout=30)[dlq].result(30)
    until(lambda: not _topic_exists(kafka_admin, dlq), f"{dlq} deleted", 60, interval=0.2)

    second = range(first, count)
    rejected = {n for n in second if n % 100 == 7}
    # Per partition, the offset of the first message rejected while the DLQ is gone.
    barrier = {p: min(n // PARTITIONS for n in rejected if n % PARTITIONS == p)
               for p in {n % PARTITIONS for n in rejected}}

    def no_commit_past_rejected() -> list[str]:
        offsets = committed(kafka_bootstrap, group, topic, PARTITIONS)
        return [f"partition {p}: committed {offsets[p]} past rejected offset {o}"
                for p, o in barrier.items() if offsets[p] > o]

    with Sampler(no_commit_past_rejected) as sampler:
        produce(kafka_bootstrap, topic, second, PARTITIONS)
        # Everything else of the batch is persisted: only the dead letters hold commits back.
        until(lambda: len(event_ids(events(pg_url), "picky")) == count - len(
            {n for n in range(count) if n % 100 == 7}), "picky's events", 120, interval=0.3)
        until(lambda: all(committed(kafka_bootstrap, group, topic, PARTITIONS)[p] == o
                          for p, o in barrier.items()),
              "commits up to the first rejected offsets", 60, interval=0.3)
    kafka_admin.create_topics([NewTopic(dlq, num_partitions=1, replication_factor=1)])[
        dlq].result(30)
    back = time.monotonic()
    wait_committed_end(kafka_bootstrap, group, topic, PARTITIONS, size.pick(120, 600))
    recovered = time.monotonic() - back
    # The triggerer notices the new incarnation and sends again what an incarnation it
    # cannot vouch for acknowledged; only then is the topic's content final.
    until(lambda: log_lines(process, "dead-letter topic") != [],
          "the triggerer noticing the recreated dead-letter topic", 60, interval=0.2)
    records: list[DeadLetter] = []
    missing: set[int] = set(rejected)

    def all_dead_lettered() -> bool:
        records[:] = dead_letters(kafka_bootstrap, dlq)
        missing.clear()
        missing.update(rejected - {r.partition + PARTITIONS * r.offset for r in records})
        return not missing

    until(all_dead_lettered, "every rejected message in the recreated DLQ", 60, interval=0.5)
    lost_all, dup_all = _exactly_once(pg_url, "everything", set(range(count)))
    figures.record("DLQ topic deleted, then recreated", messages=count, faults=1,
                   lost=lost_all + len(missing), duplicates=dup_all,
                   recover_seconds=recovered, held_rejected=len(rejected),
                   commits_past_rejected=len(sampler.violations),
                   dlq_duplicate_records=duplicates(r.identity for r in records))
    assert sampler.violations == [] and sampler.samples > 0
    assert missing == set() and (lost_all, dup_all) == (0, 0)
    assert process.running()

"""Horizontal scaling under churn: 3 triggerers in one group on 12 partitions.

While messages flow, each cycle kills one member with SIGKILL, starts a
replacement, stops another with SIGTERM (it must exit 0) and starts its
replacement, so partitions move between members by crash and by revoke.
Afterwards every expected event exists exactly once (rows counted in
PostgreSQL), every rejected message has a DLQ record (duplicate records from a
crash are allowed by guarantee 6, counted and reported) and no process logged
a failed commit.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from faultkit import Figures, Size, dead_letters, duplicates, log_lines, wait_committed_end
from streams import create_schema, event_ids, events, produce
from triggerer import ORDERS, Triggerer, write_config

PARTITIONS = 12
MEMBERS = 3


def test_three_members_killed_started_and_stopped_lose_and_duplicate_nothing(
        pg_url: str, kafka_bootstrap: str, create_topic: Callable[..., str],
        connection: dict[str, Any], triggerers: Callable[..., Triggerer], tmp_path: Path,
        size: Size, figures: Figures) -> None:
    count = size.pick(10_000, 60_000)
    cycles = size.pick(3, 12)
    topic = create_topic("scale", partitions=PARTITIONS)
    dlq = create_topic("scale-dlq")
    create_schema(pg_url)
    config = write_config(tmp_path / "sharedstream.toml", database_url=pg_url,
                          connection=connection)
    env = {"E2E_TOPIC": topic, "E2E_DLQ": dlq, "E2E_WATCHERS": "everything,picky"}
    pool = [triggerers(config, ORDERS, env=env).start() for _ in range(MEMBERS)]
    for member in pool:
        member.wait_ready()
    everyone = list(pool)
    # Traffic in the background, spread over the run so every cycle hits messages in flight.
    chunks = [range(start, min(start + count // (cycles + 1), count))
              for start in range(0, count, count // (cycles + 1))]
    def traffic() -> None:
        for chunk in chunks:
            produce(kafka_bootstrap, topic, chunk, PARTITIONS)

    producer = threading.Thread(target=traffic)
    producer.start()
    rng = random.Random(9)
    kills = stops = 0
    for _ in range(cycles):
        victim = pool.pop(rng.randrange(len(pool)))
        victim.kill()
        kills += 1
        newcomer = triggerers(config, ORDERS, env=env).start()
        everyone.append(newcomer)
        newcomer.wait_ready()
        pool.append(newcomer)
        leaver = pool.pop(rng.randrange(len(pool)))
        leaver.signal(signal.SIGTERM)
        assert leaver.wait(60) == 0, leaver.log()[-4000:]
        stops += 1
        newcomer = triggerers(config, ORDERS, env=env).start()
        everyone.append(newcomer)
        newcomer.wait_ready()
        pool.append(newcomer)
    producer.join(300)
    assert not producer.is_alive()
    last_fault = time.monotonic()
    group = f"{connection['group.id']}.{topic}"
    wait_committed_end(kafka_bootstrap, group, topic, PARTITIONS, size.pick(180, 900))
    recovered = time.monotonic() - last_fault
    for member in pool:
        member.signal(signal.SIGTERM)
    for member in pool:
        assert member.wait(60) == 0, member.log()[-4000:]

    found = events(pg_url)
    everything, picky = event_ids(found, "everything"), event_ids(found, "picky")
    rejected = {n for n in range(count) if n % 100 == 7}
    kept_by_picky = set(range(count)) - rejected
    lost = (len(set(range(count)) - set(everything))
            + len(kept_by_picky - set(picky)))
    duplicate_events = sum(n - 1 for n in everything.values()) + sum(
        n - 1 for n in picky.values())
    records = dead_letters(kafka_bootstrap, dlq)
    dead_offsets = {(r.partition, r.offset) for r in records}
    rejected_coordinates = {(n % PARTITIONS, n // PARTITIONS) for n in rejected}
    commit_errors = [line for member in everyone for line in log_lines(member, "commit failed")]
    figures.record("horizontal scaling (3 members, kill -9 / start / SIGTERM)",
                   messages=count, faults=kills + stops,
                   lost=lost + len(rejected_coordinates - dead_offsets),
                   duplicates=duplicate_events, recover_seconds=recovered,
                   kills=kills, graceful_stops=stops, processes=len(everyone),
                   dlq_records=len(records),
                   dlq_duplicate_records=duplicates(r.identity for r in records))
    assert set(everything) == set(range(count)) and set(picky) == kept_by_picky
    assert duplicate_events == 0
    assert dead_offsets == rejected_coordinates
    assert all(r.watchers == {"picky"} for r in records)
    assert commit_errors == []

"""``sharedstream dlq inspect|replay`` on the real broker, with the real triggerer path.

Dead letters are made by the triggerer itself (KafkaSharedStreamProducer ->
SharedStreamManager -> DatabaseWorkSink on PostgreSQL) with two watchers, one
of which rejects some messages; the replay goes back through the same path.
Tests that only need DLQ records write them with ``build_dlq_headers``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from confluent_kafka import Consumer, TopicPartition
from db_schemas import postgres_schema_url
from kafka_triggerer import running_group
from sqlalchemy import func, select

from kafka_probe import committed_partitions
from kafka_writes import ordered_producer
from sharedstream.cli import cli
from sharedstream.core.message import Coordinates, KafkaMessage
from sharedstream.kafka import dlq_headers as h
from sharedstream.statestore import StateStore
from sharedstream.statestore.models import asset_event
from sharedstream.triggerer.config import ProcessSettings
from sharedstream.triggers.base import TriggerEvent, reject_shared_stream_event
from sharedstream.triggers.kafka import KafkaSharedStreamTrigger

BAD = (2, 5, 7, 8)
T0 = 1_700_000_000_000


class Picky(KafkaSharedStreamTrigger):
    """Rejects values containing ``bad`` unless ``fixed``; records what it was handed."""

    fixed = False

    async def filter_shared_stream(self, stream: AsyncIterator[Any]
                                   ) -> AsyncIterator[TriggerEvent]:
        self.seen: list[tuple[int, int, int]] = []
        message: KafkaMessage
        async for message in stream:
            self.seen.append((message.partition, message.offset, message.timestamp))
            value = (message.value or b"").decode()
            if "bad" in value and not self.fixed:
                reject_shared_stream_event(f"bad value {value}")
                continue
            yield TriggerEvent({"offset": message.offset, "value": value})


@pytest.fixture
def pg_url(database_url: str) -> Iterator[str]:
    yield from postgres_schema_url(database_url)


@pytest.fixture
def env(kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The ``kafka_default`` connection for the commands, in-process and in subprocesses."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SHAREDSTREAM_CONFIG", raising=False)
    monkeypatch.setenv("SHAREDSTREAM_CONN_KAFKA_DEFAULT",
                       json.dumps({"bootstrap.servers": kafka_bootstrap}))
    return dict(os.environ)


def invoke(*args: str, code: int = 0) -> Result:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == code, (result.output, result.stderr)
    return result


def as_json(*args: str) -> Any:
    return json.loads(invoke(*args, "--json").stdout)


async def until(check: Callable[[], Any], what: str, within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while not await asyncio.to_thread(check):
        assert time.monotonic() < deadline, f"not reached within {within}s: {what}"
        await asyncio.sleep(0.1)


def end_offsets(bootstrap: str, topic: str, partitions: int = 1) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe"})
    try:
        return [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(partitions)]
    finally:
        c.close()


def committed_sum(bootstrap: str, group: str, topic: str, partitions: int = 1) -> int:
    tps = committed_partitions(bootstrap, group, topic, partitions)
    return sum(max(tp.offset, 0) for tp in tps)


def read_all(bootstrap: str, topic: str, partitions: int = 1) -> list[Any]:
    """Every record of ``topic`` up to its current end."""
    ends = end_offsets(bootstrap, topic, partitions)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe",
                  "enable.partition.eof": True})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions) if ends[p]])
    out: list[Any] = []
    deadline = time.monotonic() + 30
    try:
        while len(out) < sum(ends):
            assert time.monotonic() < deadline, f"read {len(out)} of {sum(ends)}"
            out.extend(m for m in c.consume(100, 0.5) if m.error() is None)
    finally:
        c.close()
    return out


def produce_source(bootstrap: str, topic: str, count: int) -> None:
    p = ordered_producer(bootstrap)
    for i in range(count):
        value = f"bad-{i}" if i in BAD else f"ok-{i}"
        p.produce(topic, value.encode(), f"k{i}".encode(), partition=i % 2,
                  headers=[("trace", f"t{i}".encode())], timestamp=T0 + i)
    assert p.flush(30) == 0


def write_dead_letters(bootstrap: str, dlq: str, source: str, count: int,
                       copies: tuple[int, ...] = (), foreign: int = 0) -> None:
    """``count`` DLQ records (offsets 0..count-1 of ``source``), a second copy of those in
    ``copies``, then ``foreign`` records without our headers."""
    p = ordered_producer(bootstrap)
    for i in [*range(count), *copies]:
        headers = h.build_dlq_headers(
            original_headers=[("trace", f"t{i}".encode())],
            origin=Coordinates(source, "TID", 0, i, T0 + i), consumer_group="g",
            rejections={"picky": f"reason {i % 3}"}, replay_count=0)
        p.produce(dlq, f"v{i}".encode(), f"k{i}".encode(), headers=headers, timestamp=T0 + i)
    for i in range(foreign):
        p.produce(dlq, b"\xff\x00" + bytes([i]), None, headers=[("origin", b"elsewhere")])
    assert p.flush(30) == 0


@asynccontextmanager
async def triggerer(bootstrap: str, store: StateStore, topic: str, dlq: str, group_id: str,
                    *, fixed: bool) -> AsyncIterator[dict[str, Picky]]:
    """Watchers ``all`` (accepts everything) and ``picky`` in one shared stream."""
    triggers = {name: Picky(topics=[topic], kafka_config_id="k", dlq_topic=dlq)
                for name in ("all", "picky")}
    triggers["all"].fixed = True
    triggers["picky"].fixed = fixed
    async with running_group(bootstrap, store, group_id, triggers,
                             {name: f"{name}_orders" for name in triggers},
                             process=ProcessSettings(uow_batch_size=50)):
        yield triggers


def event_counts(store: StateStore) -> dict[tuple[str, int, int], int]:
    e = asset_event.c
    with store.engine.connect() as conn:
        rows = conn.execute(select(e.watcher, e.partition, e.offset, func.count())
                            .group_by(e.watcher, e.partition, e.offset)).all()
    return {(w, p, o): n for w, p, o, n in rows}


def per_watcher(counts: dict[tuple[str, int, int], int], watcher: str) -> int:
    return sum(n for (w, _, _), n in counts.items() if w == watcher)


async def test_rejected_then_inspected_then_replayed_to_the_rejecting_watcher_only(
    kafka_bootstrap: str, create_topic: Callable[..., str], pg_url: str, env: dict[str, str]
) -> None:
    source, dlq = create_topic("orders", partitions=2), create_topic("orders-dlq")
    produce_source(kafka_bootstrap, source, 10)
    store = StateStore.from_url(pg_url)
    store.upgrade()
    group_id = f"dlq-{uuid.uuid4().hex[:8]}"
    group = f"{group_id}.{source}"
    async with triggerer(kafka_bootstrap, store, source, dlq, group_id, fixed=False):
        await until(lambda: committed_sum(kafka_bootstrap, group, source, 2) == 10,
                    "source committed")
    assert end_offsets(kafka_bootstrap, dlq) == [4]
    counts = event_counts(store)
    assert per_watcher(counts, "all") == 10 and per_watcher(counts, "picky") == 6

    report = await asyncio.to_thread(as_json, "dlq", "inspect", dlq)
    assert (report["read"], report["distinct"], report["foreign"]) == (4, 4, 0)
    by_offset = {r["original"]["offset"]: r for r in report["records"]}
    expected = {(i % 2, i // 2): i for i in BAD}
    assert {(r["original"]["partition"], o) for o, r in by_offset.items()} == set(expected)
    topic_id = by_offset[next(iter(by_offset))]["original"]["topic_id"]
    for (partition, offset), i in expected.items():
        r = by_offset[offset]
        assert r["original"] == {"topic": source, "topic_id": topic_id, "partition": partition,
                                 "offset": offset, "timestamp": T0 + i}
        assert r["rejections"] == {"picky": f"bad value bad-{i}"}
        assert (r["replay_count"], r["copies"], r["consumer_group"]) == (0, 1, group)
        assert r["identity"] == f"{topic_id}:{partition}:{offset}"
        assert r["key"]["text"] == f"k{i}" and r["value"]["text"] == f"bad-{i}"
        assert r["timestamp"] == T0 + i
        assert [[name, v["text"]] for name, v in r["headers"]] == [
            ["trace", f"t{i}"], [h.ORIGINAL_TOPIC, source], [h.ORIGINAL_TOPIC_ID, topic_id],
            [h.ORIGINAL_PARTITION, str(partition)], [h.ORIGINAL_OFFSET, str(offset)],
            [h.ORIGINAL_TIMESTAMP, str(T0 + i)], [h.CONSUMER_GROUP, group],
            [h.REJECTIONS, json.dumps({"picky": f"bad value bad-{i}"})],
            [h.IDENTITY, r["identity"]], [h.REPLAY_COUNT, "0"]]
    stats = (await asyncio.to_thread(as_json, "dlq", "inspect", dlq, "--stats"))["stats"]
    assert stats["watchers"] == {"picky": 4} and sum(stats["reasons"].values()) == 4
    table = await asyncio.to_thread(invoke, "dlq", "inspect", dlq, "--stats")
    assert "bad-2" in table.stdout and "reasons" in table.stdout

    # Fix the watcher; replay into the source while the triggerer runs again.
    async with triggerer(kafka_bootstrap, store, source, dlq, group_id, fixed=True) as again:
        summary = await asyncio.to_thread(as_json, "dlq", "replay", dlq, "--batch-size", "2",
                                          "--to-topic", "ORIGINAL")
        assert (summary["replayed"], summary["examined"], summary["batches"]) == (4, 4, 2)
        await until(lambda: committed_sum(kafka_bootstrap, group, source, 2) == 14,
                    "replays committed")
        await until(lambda: per_watcher(event_counts(store), "picky") == 10, "picky events")
    assert again["all"].seen == []  # nothing replayed reached the watcher that had accepted
    assert sorted(again["picky"].seen) == sorted((i % 2, i // 2, T0 + i) for i in BAD)
    counts = event_counts(store)
    assert set(counts.values()) == {1}  # every (watcher, coordinates) exactly once
    assert per_watcher(counts, "all") == 10 and per_watcher(counts, "picky") == 10
    assert end_offsets(kafka_bootstrap, dlq) == [4]  # nothing rejected again

    # Resumable: a second run has nothing left to do.
    rerun = await asyncio.to_thread(as_json, "dlq", "replay", dlq, "--to-topic", "ORIGINAL")
    assert (rerun["examined"], rerun["replayed"], rerun["resumed_after_interruption"]) == (
        0, 0, False)
    store.close()


async def test_replay_loop_beyond_max_replays_is_parked(
    kafka_bootstrap: str, create_topic: Callable[..., str], pg_url: str, env: dict[str, str]
) -> None:
    source, dlq = create_topic("orders", partitions=2), create_topic("orders-dlq")
    parking = create_topic("orders-parking")
    produce_source(kafka_bootstrap, source, 6)  # offsets 2 and 5 are bad
    store = StateStore.from_url(pg_url)
    store.upgrade()
    group_id = f"dlq-{uuid.uuid4().hex[:8]}"
    group = f"{group_id}.{source}"
    async with triggerer(kafka_bootstrap, store, source, dlq, group_id, fixed=False):
        await until(lambda: end_offsets(kafka_bootstrap, dlq) == [2], "first rejections")
        first = await asyncio.to_thread(
            as_json, "dlq", "replay", dlq, "--max-replays", "1", "--parking-topic", parking,
            "--to-topic", "ORIGINAL")
        assert (first["replayed"], first["parked"]) == (2, 0)
        await until(lambda: end_offsets(kafka_bootstrap, dlq) == [4], "rejected again")
        second = await asyncio.to_thread(
            as_json, "dlq", "replay", dlq, "--max-replays", "1", "--parking-topic", parking,
            "--to-topic", "ORIGINAL")
        assert (second["examined"], second["replayed"], second["parked"]) == (2, 0, 2)
        await until(lambda: committed_sum(kafka_bootstrap, group, source, 2) == 8,
                    "source committed")
    assert end_offsets(kafka_bootstrap, dlq) == [4]
    parked = read_all(kafka_bootstrap, parking)
    replays = [h.parse_replay(m.headers()) for m in parked]
    assert sorted((r.origin.partition, r.origin.offset, r.replay_count)
                  for r in replays if r is not None) == [(0, 1, 1), (1, 2, 1)]
    assert sorted(m.value() for m in parked) == [b"bad-2", b"bad-5"]
    assert per_watcher(event_counts(store), "picky") == 4
    store.close()


def test_replay_killed_mid_way_resumes_without_losing_a_record(
    kafka_bootstrap: str, create_topic: Callable[..., str], env: dict[str, str]
) -> None:
    dlq, target = create_topic("orders-dlq"), create_topic("scratch")
    write_dead_letters(kafka_bootstrap, dlq, "orders", 60)
    group = f"replay-{uuid.uuid4().hex[:8]}"
    args = ["dlq", "replay", dlq, "--to", target, "--group", group, "--batch-size", "5"]
    child = subprocess.Popen(
        [sys.executable, "-c", "from sharedstream.cli import main; main()", *args,
         "--max-rate", "20", "--json"], env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while (done := committed_sum(kafka_bootstrap, group, dlq)) < 5:
            assert child.poll() is None, child.communicate()
            assert time.monotonic() < deadline, "no batch committed"
            time.sleep(0.05)
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.communicate()
    assert child.returncode == -signal.SIGKILL
    at_kill = committed_sum(kafka_bootstrap, group, dlq)
    assert 5 <= done <= at_kill < 60

    summary = as_json(*args)
    assert summary["resumed_after_interruption"] is True
    assert summary["examined"] == summary["replayed"] == 60 - at_kill
    assert committed_sum(kafka_bootstrap, group, dlq) == 60
    produced = read_all(kafka_bootstrap, target)
    identities = [dict(m.headers())[h.IDENTITY].decode() for m in produced]
    assert set(identities) == {f"TID:0:{i}" for i in range(60)}
    assert len(identities) - 60 <= 5  # at most the one batch in flight at the kill
    assert all(dict(m.headers())[h.REPLAY_COUNT] == b"1" for m in produced)
    again = as_json(*args)  # the finished run recorded that it finished
    assert (again["examined"], again["resumed_after_interruption"]) == (0, False)


def test_dry_run_duplicates_and_foreign_records(
    kafka_bootstrap: str, create_topic: Callable[..., str], env: dict[str, str]
) -> None:
    source, dlq, target = create_topic("orders"), create_topic("orders-dlq"), create_topic("fix")
    write_dead_letters(kafka_bootstrap, dlq, source, 3, copies=(1,), foreign=1)

    report = as_json("dlq", "inspect", dlq)
    assert (report["read"], report["distinct"], report["foreign"]) == (5, 4, 1)
    [copied] = [r for r in report["records"] if r["copies"] == 2]
    assert copied["original"]["offset"] == 1 and copied["dlq"] == [
        {"partition": 0, "offset": 1}, {"partition": 0, "offset": 3}]
    [foreign] = [r for r in report["records"] if r["foreign"]]
    assert foreign["problem"] == "no sharedstream headers"
    assert foreign["value"] == {"text": None, "base64": "/wAA"} and foreign["key"] is None
    assert "hex:ff" in invoke("dlq", "inspect", dlq).stdout  # binary-safe preview
    assert as_json("dlq", "inspect", dlq, "--limit", "2")["read"] == 2

    dry = as_json("dlq", "replay", dlq, "--dry-run")
    assert (dry["replayed"], dry["skipped_duplicates"], dry["foreign"], dry["dry_run"]) == (
        3, 1, 1, True)
    assert end_offsets(kafka_bootstrap, source) == [0]
    assert committed_sum(kafka_bootstrap, f"sharedstream-dlq-replay.{dlq}", dlq) == 0
    filtered = as_json("dlq", "replay", dlq, "--dry-run", "--filter-reason", "reason 1")
    assert (filtered["replayed"], filtered["skipped_duplicates"], filtered["filtered_out"]) == (
        1, 1, 3)

    real = as_json("dlq", "replay", dlq, "--to-topic", "ORIGINAL")
    assert (real["replayed"], real["skipped_duplicates"], real["foreign"]) == (3, 1, 1)
    assert sorted(m.value() for m in read_all(kafka_bootstrap, source)) == [b"v0", b"v1", b"v2"]
    # The group is past them now; from the start of the topic they are replayed again.
    assert as_json("dlq", "replay", dlq, "--to-topic", "ORIGINAL")["examined"] == 0
    again = as_json("dlq", "replay", dlq, "--to-topic", "ORIGINAL", "--from-start")
    assert (again["examined"], again["replayed"], again["from_start"]) == (5, 3, True)
    assert len(read_all(kafka_bootstrap, source)) == 6

    explicit = as_json("dlq", "replay", dlq, "--to", target, "--group", "other")
    assert (explicit["replayed"], explicit["foreign"]) == (4, 0)
    [moved] = [m for m in read_all(kafka_bootstrap, target) if m.key() is None]
    assert (moved.value(), moved.headers()) == (b"\xff\x00\x00", [("origin", b"elsewhere")])


def test_inspect_reads_a_page_by_default_and_says_how_many_there_are(
    kafka_bootstrap: str, create_topic: Callable[..., str], env: dict[str, str]
) -> None:
    """Without --limit, `dlq inspect` reads the oldest 100 records, not the whole topic
    (issue 43: 2,000 records took 4.5 s to print), and says how many the topic holds."""
    source, dlq = create_topic("orders"), create_topic("orders-dlq")
    write_dead_letters(kafka_bootstrap, dlq, source, 150)
    report = as_json("dlq", "inspect", dlq)
    assert (report["read"], report["available"], report["distinct"]) == (100, 150, 100)
    assert [r["original"]["offset"] for r in report["records"]] == list(range(100))
    title = invoke("dlq", "inspect", dlq).stdout
    assert "the first 100 of 150 records (--limit N reads more), 100 distinct" in title
    everything = as_json("dlq", "inspect", dlq, "--limit", "1000")
    assert (everything["read"], everything["available"]) == (150, 150)


def test_missing_topics_and_an_unreachable_broker_fail_in_one_line(
    kafka_bootstrap: str, create_topic: Callable[..., str], env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch
) -> None:
    dlq = create_topic("orders-dlq")
    write_dead_letters(kafka_bootstrap, dlq, "orders", 1)
    for args in (["inspect", "nope-" + uuid.uuid4().hex], ["replay", "nope-" + uuid.uuid4().hex],
                 ["replay", dlq, "--max-replays", "0", "--parking-topic", "nope"],
                 ["replay", dlq, "--to", "nope"]):
        result = invoke("dlq", *args, code=1)
        assert result.stderr.count("\n") == 1 and "not found" in result.stderr, result.stderr
    assert committed_sum(kafka_bootstrap, f"sharedstream-dlq-replay.{dlq}", dlq) == 0

    monkeypatch.setenv("SHAREDSTREAM_CONN_KAFKA_DEFAULT",
                       json.dumps({"bootstrap.servers": "127.0.0.1:1"}))
    for command in ("inspect", "replay"):
        result = invoke("dlq", command, dlq, "--timeout", "2", code=1)
        assert result.stderr.startswith("error: kafka:") and result.stderr.count("\n") == 1, (
            result.stderr)

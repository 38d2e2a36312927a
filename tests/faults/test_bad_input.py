"""Bad input: >= 10,000 generated records through the stock trigger and a JSON-parsing one.

Records come from a seeded generator (reproducible, no shrinking needed: the
verdict names the offsets): empty values, tombstones, invalid UTF-8, ~1.1 MB
values, deeply nested JSON (a bomb Python cannot parse, and a shallow one it
can), random text and JSON, binary or missing keys, odd headers. The topic
accepts 4 MB records; the DLQ keeps the broker default, so a rejected large
record is refused by it and must land in ``rejected_message`` instead.

The expected fate of every (watcher, offset) is computed here from the
documented behaviour; the actual one is read from ``asset_event``, the DLQ's
headers and ``rejected_message``. They must match exactly: nothing vanishes,
nothing is kept twice, the process never crashes, every partition's commits
reach its end.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from faultkit import Figures, Size, dead_letters, wait_committed_end
from streams import create_schema
from triggerer import ORDERS, Triggerer, write_config

from kafka_writes import ordered_producer
from sharedstream.statestore.models import asset_event, rejected_message

PARTITIONS = 4
LARGE = 1_100_000
KINDS = ["empty", "tombstone", "bad_utf8", "text", "json", "bomb", "nested", "large",
         "large_bad"]
WEIGHTS = [8, 8, 12, 25, 35, 2, 4, 0.1, 0.1]


def generate(rng: random.Random) -> tuple[str, bytes | None]:
    """One record value of a random kind."""
    kind = rng.choices(KINDS, WEIGHTS)[0]
    if kind == "empty":
        return kind, b""
    if kind == "tombstone":
        return kind, None
    if kind == "bad_utf8":
        return kind, bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64))) + b"\xff"
    if kind == "text":
        return kind, "".join(chr(rng.choice([rng.randrange(32, 127), rng.randrange(0xA0, 0xD7FF),
                                             rng.randrange(0x10000, 0x10FFFF)]))
                             for _ in range(rng.randrange(0, 80))).encode()
    if kind == "json":
        document = {"id": rng.randrange(10**9), "tags": [rng.random() for _ in range(3)],
                    "nested": {"ok": rng.random() < 0.5, "none": None,
                               "s": rng.choice(["é\u2028", "é\u2028\x00"])}}
        return kind, json.dumps(document).encode()
    if kind == "bomb":
        depth = rng.randrange(100_000, 200_000)
        return kind, b"[" * depth + b"]" * depth
    if kind == "nested":
        depth = rng.randrange(10, 200)
        return kind, b'{"a":' * depth + b"1" + b"}" * depth
    if kind == "large":
        return kind, rng.choice(b"abcdefgh").to_bytes(1, "big") * LARGE
    return kind, b"\xff" * LARGE


def odd_headers(rng: random.Random) -> list[tuple[str, str | bytes | None]]:
    choices: list[list[tuple[str, str | bytes | None]]] = [
        [], [("", b"")], [("dup", b"1"), ("dup", b"2")], [("none", None)],
        [("binary", bytes(range(256)))], [("ünïcødé", "✓".encode())],
        [("sharedstream.original.offset", b"not a number")]]
    return rng.choice(choices)


def expected_fate(value: bytes | None, watcher: str) -> str:
    """What the documented behaviour does with ``value`` for ``watcher``."""
    if value is None:
        return "skip"
    try:
        text = value.decode()
    except UnicodeDecodeError:
        return "reject"
    if watcher == "text":
        return "event"
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):
        return "reject"
    # No event payload may hold U+0000 (PostgreSQL's jsonb cannot store it): refused.
    return "reject" if holds_nul(document) else "event"


def holds_nul(value: Any) -> bool:
    """Whether a decoded JSON value has a NUL character in a string or a key."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, list):
        return any(holds_nul(v) for v in value)
    if isinstance(value, dict):
        return any(holds_nul(k) or holds_nul(v) for k, v in value.items())
    return False


def test_generated_bad_records_each_end_as_event_skip_or_recorded_rejection(
        pg_url: str, kafka_bootstrap: str, create_topic: Callable[..., str],
        connection: dict[str, Any], triggerers: Callable[..., Triggerer], tmp_path: Path,
        size: Size, figures: Figures) -> None:
    count = size.pick(10_000, 100_000)
    topic = create_topic("fuzz", partitions=PARTITIONS, config={"max.message.bytes": "4194304"})
    dlq = create_topic("fuzz-dlq")
    create_schema(pg_url)
    config = write_config(tmp_path / "sharedstream.toml", database_url=pg_url,
                          connection=connection)
    process = triggerers(config, ORDERS, env={
        "E2E_TOPIC": topic, "E2E_DLQ": dlq, "E2E_WATCHERS": "text,json"}).start()
    process.wait_ready()

    rng = random.Random(20261129)
    producer = ordered_producer(kafka_bootstrap, {"message.max.bytes": 4194304, "linger.ms": 5})
    values: dict[tuple[int, int], bytes | None] = {}
    kinds: Counter[str] = Counter()
    failures: list[str] = []

    def delivered(error: Any, message: Any) -> None:
        if error is not None:
            failures.append(str(error))
        else:
            values[(message.partition(), message.offset())] = message.value()

    for i in range(count):
        kind, value = generate(rng)
        kinds[kind] += 1
        key = None if rng.random() < 0.3 else bytes(rng.randrange(256) for _ in range(8))
        while True:
            try:
                producer.produce(topic, value, key, partition=i % PARTITIONS,
                                 headers=odd_headers(rng), on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(120) == 0 and failures == []

    group = f"{connection['group.id']}.{topic}"
    wait_committed_end(kafka_bootstrap, group, topic, PARTITIONS, size.pick(180, 1200))
    assert process.running(), process.log()[-4000:]

    engine = sa.create_engine(pg_url)
    with engine.connect() as db:
        event_rows = Counter((r.watcher, r.partition, r.offset) for r in db.execute(
            sa.select(asset_event.c.watcher, asset_event.c.partition, asset_event.c.offset)))
        refused = {(r.watcher, r.partition, r.offset) for r in db.execute(
            sa.select(rejected_message.c.watcher, rejected_message.c.partition,
                      rejected_message.c.offset))}
    engine.dispose()
    records = dead_letters(kafka_bootstrap, dlq)
    in_dlq = {(w, r.partition, r.offset) for r in records for w in r.watchers}

    mismatches = []
    for (partition, offset), value in values.items():
        for watcher in ("text", "json"):
            where = (watcher, partition, offset)
            actual = ("event" if where in event_rows else
                      "reject" if where in in_dlq or where in refused else "skip")
            if actual != expected_fate(value, watcher):
                mismatches.append(f"{where}: {actual}, expected {expected_fate(value, watcher)}")
    large_rejected = {(w, p, o) for (p, o), v in values.items() for w in ("text", "json")
                      if v is not None and len(v) >= LARGE
                      and expected_fate(v, w) == "reject"}
    figures.record("bad input fuzzing (text + JSON triggers)", messages=count, faults=count,
                   lost=len(mismatches), duplicates=sum(n - 1 for n in event_rows.values()),
                   recover_seconds=None, kinds=dict(kinds), dlq_records=len(records),
                   rejected_message_rows=len(refused))
    assert mismatches == [], mismatches[:20]
    assert all(n == 1 for n in event_rows.values())
    assert large_rejected <= refused, "too-large rejections must land in rejected_message"
    assert process.running()

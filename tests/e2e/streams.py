"""What the e2e tests produce and what they check afterwards, on Kafka and in the database.

Messages are JSON ``{"id": n}`` with ids ``0..n-1``; message ``n`` goes to
partition ``n % partitions`` so every partition's ids grow (watermarks rely on
it). The checks read only the broker and the database, never the triggerer.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from confluent_kafka import Consumer, Producer, TopicPartition

from kafka_probe import committed_partitions
from kafka_writes import ordered_producer
from sharedstream.kafka.progress import decode_progress
from sharedstream.ops.dlq import read_dead_letters
from sharedstream.statestore import StateStore
from sharedstream.statestore.models import asset, asset_event, asset_state_store


def new_producer(bootstrap: str) -> Producer:
    """The tests' idempotent producer (a retried send never duplicates an id)."""
    return ordered_producer(bootstrap, {"linger.ms": 5})


def produce(bootstrap: str, topic: str, ids: Iterable[int], partitions: int,
            producer: Producer | None = None) -> None:
    """Write ``{"id": n}`` for each id, acknowledged by the broker before returning.

    Pass ``producer`` (from :func:`new_producer`) when producing many small chunks: a new
    idempotent producer waits about half a second for its producer id before its first send.
    """
    failures: list[str] = []

    def report(error: object, _message: object) -> None:
        if error is not None:
            failures.append(str(error))

    producer = producer or new_producer(bootstrap)
    for n in ids:
        while True:
            try:
                producer.produce(topic, json.dumps({"id": n}).encode(), key=str(n).encode(),
                                 partition=n % partitions, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    remaining = producer.flush(60)
    assert remaining == 0 and not failures, f"produce failed: {remaining} left, {failures[:3]}"


def _consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                     "enable.auto.commit": False, "auto.offset.reset": "earliest"})


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The consumer group's committed offset per partition (-1 when none), without joining."""
    found = committed_partitions(bootstrap, group, topic, partitions)
    return {tp.partition: tp.offset if tp.offset >= 0 else -1 for tp in found}


def committed_messages(bootstrap: str, group: str, topic: str,
                       partitions: int) -> set[tuple[int, int]]:
    """(partition, offset) of every message the group's commit says is handled: below the
    committed offset, or remembered above it in the commit metadata (guarantee 7)."""
    found = committed_partitions(bootstrap, group, topic, partitions)
    handled: set[tuple[int, int]] = set()
    for tp in found:
        if tp.offset < 0:
            continue
        handled.update((tp.partition, o) for o in range(tp.offset))
        handled.update((tp.partition, o) for o in decode_progress(tp.offset, tp.metadata))
    return handled


def handouts(directory: Path) -> dict[str, Counter[tuple[str, int, int]]]:
    """Per process (pid): how often each watcher was handed each (partition, offset)."""
    out: dict[str, Counter[tuple[str, int, int]]] = {}
    for path in sorted(directory.glob("*.log")):
        counts: Counter[tuple[str, int, int]] = Counter()
        for line in path.read_text().splitlines():
            watcher, partition, offset = line.split()
            counts[(watcher, int(partition), int(offset))] += 1
        out[path.stem] = counts
    return out


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = _consumer(bootstrap, "e2e-watermarks")
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(partitions)}
    finally:
        consumer.close()


def dlq_records(bootstrap: str, topic: str, timeout: float = 30.0) -> list[tuple[str, int]]:
    """``(identity header, original id)`` of every record on the DLQ topic, read by the
    product's reader (``sharedstream.ops.dlq``); ``timeout`` bounds each wait for records."""
    records: list[tuple[str, int]] = []
    for record in read_dead_letters({"bootstrap.servers": bootstrap}, topic, timeout=timeout):
        assert record.identity is not None and record.value is not None, record.problem
        records.append((record.identity, json.loads(record.value)["id"]))
    return records


@contextmanager
def connect(db: str | sa.Engine) -> Iterator[sa.Connection]:
    """A connection to ``db``: from the caller's engine when given one (a poller asking
    many times a second keeps one pool, see :func:`database`), else from a throwaway
    engine for the URL."""
    if isinstance(db, sa.Engine):
        with db.connect() as connection:
            yield connection
        return
    engine = sa.create_engine(db)
    try:
        with engine.connect() as connection:
            yield connection
    finally:
        engine.dispose()


@contextmanager
def database(url: str) -> Iterator[sa.Engine]:
    """One engine for a test's many small reads, disposed (its connections closed) at the
    end: a new engine per read costs a new connection, on PostgreSQL a new server process."""
    engine = sa.create_engine(url)
    try:
        yield engine
    finally:
        engine.dispose()


@dataclass(frozen=True, slots=True)
class Event:
    watcher: str
    id: int
    partition: int
    offset: int


def events(db: str | sa.Engine) -> list[Event]:
    with connect(db) as connection:
        rows = connection.execute(sa.select(
            asset_event.c.watcher, asset_event.c.payload, asset_event.c.partition,
            asset_event.c.offset)).all()
    return [Event(row.watcher, json.loads(row.payload)["id"], row.partition, row.offset)
            for row in rows]


def event_keys(db: str | sa.Engine, watcher: str) -> set[tuple[int, int]]:
    """(partition, offset) of every message ``watcher`` has an event of (payloads unread)."""
    with connect(db) as connection:
        return {(p, o) for p, o in connection.execute(
            sa.select(asset_event.c.partition, asset_event.c.offset)
            .where(asset_event.c.watcher == watcher))}


def event_ids(found: Iterable[Event], watcher: str) -> Counter[int]:
    """How many events each id has for ``watcher`` (a count above 1 is a duplicate)."""
    return Counter(e.id for e in found if e.watcher == watcher)


def watermark_mismatches(db: str | sa.Engine, watchers: Iterable[str],
                         partitions: int) -> list[str]:
    """Guarantee 3 in one snapshot of the database: each watcher's persisted ``watermark``
    must equal the highest id among its persisted events (both are written in one
    transaction per message, so no reader may ever see one without the other).

    One statement, so one snapshot on every backend (a commit landing between two reads
    could pass for a violation). Cheap enough to sample: the highest id comes from the
    events' keys, not their payloads, as :func:`produce` placed the ids (id ``n`` is
    offset ``n // partitions`` of partition ``n % partitions``), so no payload is parsed.
    """
    names = list(watchers)
    mark = (sa.select(asset_state_store.c.value)
            .where(asset_state_store.c.asset_id == asset.c.id,
                   asset_state_store.c.key == "watermark").scalar_subquery())
    top = (sa.select(sa.func.max(asset_event.c.offset * partitions + asset_event.c.partition))
           .where(asset_event.c.watcher == asset.c.name).scalar_subquery())
    with connect(db) as connection:
        rows = connection.execute(
            sa.select(asset.c.name, mark, top).where(asset.c.name.in_(names))).all()
    watermark = {name: None if value is None else json.loads(value) for name, value, _ in rows}
    highest = {name: None if high is None else int(high) for name, _, high in rows}
    return [f"{w}: watermark {watermark.get(w)} but highest event id {highest.get(w)}"
            for w in names if watermark.get(w) != highest.get(w)]


def event_count(db: str | sa.Engine, watcher: str) -> int:
    with connect(db) as connection:
        return int(connection.execute(
            sa.select(sa.func.count()).select_from(asset_event)
            .where(asset_event.c.watcher == watcher)).scalar_one())


def create_schema(database_url: str) -> None:
    """Migrate an empty database up front, so a test can query it before the triggerer runs."""
    store = StateStore.from_url(database_url)
    try:
        store.upgrade()
    finally:
        store.close()


def state_value(database_url: str, asset_name: str, key: str) -> object:
    engine = sa.create_engine(database_url)
    try:
        with engine.connect() as connection:
            value = connection.execute(
                sa.select(asset_state_store.c.value)
                .join(asset, asset.c.id == asset_state_store.c.asset_id)
                .where(asset.c.name == asset_name, asset_state_store.c.key == key)
            ).scalar_one_or_none()
    finally:
        engine.dispose()
    return None if value is None else json.loads(value)


def persisted_prefix(found: Iterable[Event], watchers: Iterable[str],
                     partitions: int) -> dict[int, int]:
    """Per partition, the first offset not yet persisted by every watcher (all keep all)."""
    by_watcher: dict[str, dict[int, set[int]]] = {}
    for e in found:
        by_watcher.setdefault(e.watcher, {}).setdefault(e.partition, set()).add(e.offset)
    prefix: dict[int, int] = {}
    for p in range(partitions):
        ends = []
        for watcher in watchers:
            offsets = by_watcher.get(watcher, {}).get(p, set())
            end = 0
            while end in offsets:
                end += 1
            ends.append(end)
        prefix[p] = min(ends)
    return prefix

"""Issue 28's references: keeping every message, written by hand, without sharedstream.

What a careful engineer writes when each message must become a durable row and the
offsets may move only past rows that committed: one confluent-kafka consumer
(``enable.auto.commit`` off), ``consume()`` a batch, write its rows in ONE transaction,
commit it, then commit the batch's offsets (asynchronously: a lost offset commit only
means a redelivery, since the rows are already durable; the last one is synchronous).

* PostgreSQL: psycopg 3 ``COPY`` of the batch's rows;
* SQLite: the ``sqlite3`` module, ``executemany`` of one ``INSERT``, with the pragmas
  sharedstream's engine sets (WAL, so ``synchronous`` stays at its FULL default).

Each row holds what the bench's ``KeepTrigger`` event holds (the offset and the produce
timestamp as JSON) plus the message's coordinates. Timed like ``kafka_throughput.shared``:
from the first message consumed until the last offset commit returned.

A second pair (``postgres_schema``, ``sqlite_schema``) writes the same messages as the
rows sharedstream writes, into sharedstream's own ``asset_event`` table (its four indexes,
the ids taken from ``event_sequence`` in the same transaction, so they are commit
ordered, and on PostgreSQL the same notification): what a careful engineer writes by hand
when the product's readers (delivery, ``events list``) must read the rows. Only the schema
is made by sharedstream (``StateStore.upgrade``, before the timed part); the writes are
plain psycopg and ``sqlite3``. The issue's targets are judged on the lean references
above; these show how much of the gap is the table.

``DurablePostgres`` is the PostgreSQL the issue 28 figures count on: the project's test
server (``scripts/localservices``) runs with ``fsync``, ``synchronous_commit`` and
``full_page_writes`` off; this one runs with all three on.
"""

from __future__ import annotations

import json
import queue
import sqlite3
import sys
import time
import uuid
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import sqlalchemy as sa
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from sharedstream.statestore import StateStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from localservices import PostgresServer  # type: ignore[import-not-found]

BATCH = 500  # messages per consume() and per transaction


class DurablePostgres(PostgresServer):  # type: ignore[misc]
    """The test server with durability on: every commit waits for its WAL flush."""

    def _argv(self) -> list[str]:
        argv: list[str] = super()._argv()
        durable = {"fsync=off": "fsync=on", "synchronous_commit=off": "synchronous_commit=on",
                   "full_page_writes=off": "full_page_writes=on"}
        return [durable.get(arg, arg) for arg in argv]


def settings(url: str) -> dict[str, str]:
    """``fsync`` and ``synchronous_commit`` of the server at ``url``, as it reports them."""
    with psycopg.connect(libpq(url)) as conn:
        return {name: str(conn.execute(f"SHOW {name}").fetchone()[0])  # type: ignore[index]
                for name in ("fsync", "synchronous_commit")}


def checkpoint(url: str) -> None:
    """Write out everything the server holds dirty (``CHECKPOINT``, at full speed).

    Why: the throughput runs write over a gigabyte of WAL, more than ``max_wal_size``,
    so the server starts a checkpoint that it spreads over minutes; the latency runs
    after them then share the disk with its writes and ``fsync``s, and their p99 at
    5,000 msg/s was 80-130 ms on a machine where it is 13-16 ms on a server that has
    caught up (issue 28, seventh round)."""
    with psycopg.connect(libpq(url), autocommit=True) as conn:
        conn.execute("CHECKPOINT")


def checkpoints(url: str) -> int:
    """Checkpoints the server has begun so far (timed or requested): taken before and
    after a run, whether one ran in it."""
    with psycopg.connect(libpq(url)) as conn:
        row = conn.execute("SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter"
                           ).fetchone()
    assert row is not None
    return int(row[0])


def libpq(url: str) -> str:
    """The psycopg connection string of a SQLAlchemy ``postgresql+psycopg://`` URL."""
    return sa.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def _consumer(bootstrap: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": f"ref-{uuid.uuid4().hex}",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False})


Row = tuple[str, int, int, str]  # topic, partition, offset, payload


def _rows(batch: list[Message[Any, Any]]) -> list[Row]:
    rows: list[Row] = []
    for message in batch:
        topic, partition, offset = message.topic(), message.partition(), message.offset()
        if message.error() or topic is None or partition is None or offset is None:
            raise RuntimeError(str(message.error()))
        payload = json.dumps({"offset": offset, "ts": message.timestamp()[1]})
        rows.append((topic, partition, offset, payload))
    return rows


class _Timed:
    """The batches of ``consume()`` until ``messages`` were read, timed from the first."""

    def __init__(self, consumer: Consumer, messages: int) -> None:
        self.consumer = consumer
        self.messages = messages
        self.first = 0.0

    def __iter__(self) -> Iterator[tuple[list[Message[Any, Any]], bool]]:
        """Each batch, and whether it is the last."""
        done = 0
        while done < self.messages:
            batch = self.consumer.consume(BATCH, 1.0)
            if not batch:
                continue
            if not self.first:
                self.first = time.perf_counter()
            done += len(batch)
            yield batch, done >= self.messages

    def rate(self) -> float:
        """Messages/s from the first message read until now."""
        return self.messages / (time.perf_counter() - self.first)


def _run(bootstrap: str, topic: str, messages: int, write: Any) -> float:
    """Messages/s: consume, ``write(rows)`` (one committed transaction), commit offsets."""
    consumer = _consumer(bootstrap)
    consumer.subscribe([topic])
    timed = _Timed(consumer, messages)
    try:
        for batch, last in timed:
            write(_rows(batch))
            if not last:
                consumer.commit(asynchronous=True)
        try:
            consumer.commit(asynchronous=False)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError._NO_OFFSET:  # else: all committed already
                raise
        return timed.rate()
    finally:
        consumer.close()


def postgres(bootstrap: str, topic: str, messages: int, url: str) -> float:
    """The psycopg reference: ``COPY`` each batch in one transaction."""
    with psycopg.connect(libpq(url)) as conn:
        conn.execute("CREATE TABLE ref_event (id bigserial PRIMARY KEY, topic text NOT NULL, "
                     "partition int NOT NULL, \"offset\" bigint NOT NULL, payload text NOT NULL, "
                     "created_at timestamptz NOT NULL DEFAULT now(), "
                     "UNIQUE (topic, partition, \"offset\"))")
        conn.commit()

        def write(rows: list[Row]) -> None:
            with conn.transaction(), conn.cursor() as cur, cur.copy(
                    'COPY ref_event (topic, partition, "offset", payload) FROM STDIN') as copy:
                for row in rows:
                    copy.write_row(row)

        rate = _run(bootstrap, topic, messages, write)
        stored = conn.execute("SELECT count(*) FROM ref_event").fetchone()
    assert stored is not None and stored[0] == messages, stored
    return rate


def sqlite(bootstrap: str, topic: str, messages: int, path: Path) -> float:
    """The sqlite3 reference: one ``executemany`` per batch, in one transaction."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE ref_event (id INTEGER PRIMARY KEY, topic TEXT NOT NULL, "
                     "partition INTEGER NOT NULL, \"offset\" INTEGER NOT NULL, "
                     "payload TEXT NOT NULL, created_at TEXT NOT NULL DEFAULT "
                     "CURRENT_TIMESTAMP, UNIQUE (topic, partition, \"offset\"))")

        def write(rows: list[Row]) -> None:
            conn.execute("BEGIN")
            conn.executemany('INSERT INTO ref_event (topic, partition, "offset", payload) '
                             "VALUES (?, ?, ?, ?)", rows)
            conn.execute("COMMIT")

        rate = _run(bootstrap, topic, messages, write)
        (stored,) = conn.execute("SELECT count(*) FROM ref_event").fetchone()
    finally:
        conn.close()
    assert stored == messages, stored
    return rate


# -- the same rows into sharedstream's schema ---------------------------------------------------

WATCHER = "w0"  # the bench's watcher name (its asset: ``bench_w0``)
EVENT_COLUMNS = ('id, asset_id, watcher, payload, topic, topic_id, partition, "offset", '
                 "event_index, created_at")


def _product_schema(url: str, bootstrap: str, topic: str) -> tuple[int, str]:
    """Create sharedstream's tables at ``url`` (untimed); the asset id of the bench's
    watcher and the topic's id, as the product keys its events by them."""
    store = StateStore.from_url(url)
    try:
        store.upgrade()
        asset_id = store.register_asset(f"bench_{WATCHER}")
    finally:
        store.close()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    described = admin.describe_topics(TopicCollection([topic]))[topic].result(30)
    return asset_id, str(described.topic_id)


def _copy_schema_rows(conn: psycopg.Connection[Any], rows: list[Row], asset_id: int,
                      topic_id: str) -> None:
    """One transaction: take the ids from ``event_sequence`` (its row locked until the
    commit: commit-ordered ids) and ``COPY`` the rows into ``asset_event``."""
    created = datetime.now(UTC)
    with conn.transaction(), conn.cursor() as cur:
        allocated = cur.execute(
            "UPDATE event_sequence SET last_id = last_id + %(n)s WHERE id = 1 "
            "RETURNING last_id - %(n)s, pg_notify('sharedstream_events', '')",
            {"n": len(rows)}).fetchone()
        assert allocated is not None
        with cur.copy(f"COPY asset_event ({EVENT_COLUMNS}) FROM STDIN") as copy:
            for event_id, (name, partition, offset, payload) in enumerate(
                    rows, allocated[0] + 1):
                copy.write_row((event_id, asset_id, WATCHER, payload, name, topic_id,
                                partition, offset, 0, created))


def _stored(url: str, messages: int) -> None:
    with psycopg.connect(libpq(url)) as conn:
        stored = conn.execute("SELECT count(*), max(id) FROM asset_event").fetchone()
    assert stored == (messages, messages), stored


def postgres_schema(bootstrap: str, topic: str, messages: int, url: str) -> float:
    """psycopg into ``asset_event``: per batch, one transaction that takes the ids and
    ``COPY``s the rows (``_copy_schema_rows``)."""
    asset_id, topic_id = _product_schema(url, bootstrap, topic)
    with psycopg.connect(libpq(url)) as conn:
        rate = _run(bootstrap, topic, messages,
                    lambda rows: _copy_schema_rows(conn, rows, asset_id, topic_id))
    _stored(url, messages)
    return rate


def postgres_schema_writers(bootstrap: str, topic: str, messages: int, url: str,
                            writers: int) -> float:
    """``postgres_schema`` with the transactions on ``writers`` connections, a thread each,
    while the consumer reads on: what several writers could gain (issue 28).

    Every transaction still takes its ids under the sequence row's lock, which it holds
    until its ``COMMIT`` (commit-ordered ids), so one connection's ``COPY`` waits for the
    other's commit; what can overlap is the formatting of rows, ``BEGIN``, the update's
    round trip, and the consumer's reads. With ``writers=1`` it measures that overlap of
    reading and writing alone. A batch's offsets are committed in the order it was read,
    once its transaction and every earlier one committed.
    """
    asset_id, topic_id = _product_schema(url, bootstrap, topic)
    idle: queue.SimpleQueue[psycopg.Connection[Any]] = queue.SimpleQueue()
    for _ in range(writers):
        idle.put(psycopg.connect(libpq(url)))

    def write(rows: list[Row]) -> None:
        conn = idle.get()
        try:
            _copy_schema_rows(conn, rows, asset_id, topic_id)
        finally:
            idle.put(conn)

    consumer = _consumer(bootstrap)
    consumer.subscribe([topic])
    timed = _Timed(consumer, messages)
    pending: deque[tuple[Future[None], list[TopicPartition]]] = deque()

    def settle_oldest(asynchronous: bool) -> None:
        written, offsets = pending.popleft()
        written.result()
        consumer.commit(offsets=offsets, asynchronous=asynchronous)

    try:
        with ThreadPoolExecutor(writers) as pool:
            for batch, _ in timed:
                rows = _rows(batch)
                ends = {(t, p): o + 1 for t, p, o, _ in rows}
                pending.append((pool.submit(write, rows),
                                [TopicPartition(t, p, o) for (t, p), o in ends.items()]))
                while len(pending) > writers:
                    settle_oldest(True)
            while pending:
                settle_oldest(len(pending) > 1)
        rate = timed.rate()
    finally:
        consumer.close()
        while not idle.empty():
            idle.get().close()
    _stored(url, messages)
    return rate


def sqlite_schema(bootstrap: str, topic: str, messages: int, path: Path) -> float:
    """``sqlite3`` into ``asset_event``: per batch, in one transaction, take the ids from
    ``event_sequence`` and ``executemany`` one ``INSERT``."""
    asset_id, topic_id = _product_schema(f"sqlite:///{path}", bootstrap, topic)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")

        def write(rows: list[Row]) -> None:
            # How SQLAlchemy stores a UTC instant on SQLite (naive, microseconds).
            created = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
            conn.execute("BEGIN")
            (last,) = conn.execute("UPDATE event_sequence SET last_id = last_id + ? "
                                   "WHERE id = 1 RETURNING last_id", (len(rows),)).fetchone()
            first = last - len(rows) + 1
            conn.executemany(
                f"INSERT INTO asset_event ({EVENT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, "
                "?, ?)", [(event_id, asset_id, WATCHER, payload, name, topic_id, partition,
                           offset, 0, created)
                          for event_id, (name, partition, offset, payload)
                          in enumerate(rows, first)])
            conn.execute("COMMIT")

        rate = _run(bootstrap, topic, messages, write)
        stored = conn.execute("SELECT count(*), max(id) FROM asset_event").fetchone()
    finally:
        conn.close()
    assert stored == (messages, messages), stored
    return rate

"""Persisted asset events: written in commit order, read by cursor, listed and cleaned.

**Commit-ordered ids.** Every writer (the unit-of-work sink, the standalone runner)
inserts events through :func:`insert_events`, which allocates their ids from the
one-row ``event_sequence`` table as the LAST step of its transaction: the
``UPDATE`` takes that row's lock and holds it until the commit. So a transaction
can only get ids after every transaction that got lower ids has committed or rolled
back (a rollback also rolls the sequence back: no gap). A reader that sees id N
therefore sees every lower id too, and ``id > cursor`` never skips a row that
commits late: the outbox trap of autoincrement ids, which are assigned at insert
time, not at commit. The price: event inserts of concurrent processes serialise on
that row for the length of an insert and a commit.

Deleting events is also how an operator makes a deliberate reprocessing produce
events again: events are idempotent on (watcher, topic id, partition, offset,
index), so re-reading offsets whose events still exist creates nothing new.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Select, func, select, text, update
from sqlalchemy.engine import Connection, Engine, Row

from sharedstream.core.message import Coordinates
from sharedstream.statestore.maintenance import CleanupReport, delete_in_batches
from sharedstream.statestore.models import asset, asset_event, event_sequence
from sharedstream.statestore.sql import (
    bound_columns,
    insert_ignore_many,
    insert_ignore_tuples,
    json_rows,
    record_fields,
)


@dataclass(frozen=True, slots=True)
class EventRecord:
    """One ``asset_event`` row (``payload`` decoded from JSON), with its asset's uri."""

    id: int
    asset: str
    asset_uri: str | None
    watcher: str
    origin: Coordinates  # no timestamp: asset_event does not keep it
    event_index: int
    created_at: datetime
    payload: Any
    # The W3C trace context it was made in (the tracing room), or None: not in as_json.
    trace_context: str | None = None

    @property
    def identity(self) -> str:
        """``watcher/topic_id:partition:offset/index``: the event's unique key as one string,
        the idempotency key destinations see (the same after any redelivery)."""
        return f"{self.watcher}/{self.origin.identity}/{self.event_index}"

    def as_json(self) -> dict[str, Any]:
        """The flat form ``events list --json`` prints (its keys are a CLI contract)."""
        o = self.origin
        return {"id": self.id, "asset": self.asset, "watcher": self.watcher, "topic": o.topic,
                "topic_id": o.topic_id, "partition": o.partition, "offset": o.offset,
                "event_index": self.event_index, "created_at": self.created_at,
                "payload": self.payload}


NOTIFY_CHANNEL = "sharedstream_events"

# An event row as the unit-of-work writer builds it: a plain tuple of these columns, in
# this order, without the id (allocated at insert); ``trace_context`` may follow.
EVENT_COLUMNS = ("asset_id", "watcher", "payload", "topic", "topic_id", "partition", "offset",
                 "event_index", "created_at")


def insert_events(connection: Connection, rows: list[dict[str, Any]]) -> int:
    """Insert ``asset_event`` rows (without ids) with commit-ordered ids; return how many
    were new (duplicates of the unique key are skipped, leaving unused ids).

    Call it last in the transaction: from here to the commit the sequence row is locked
    (see the module docstring).
    """
    if not rows:
        return 0
    dialect = connection.dialect.name
    if dialect == "postgresql":
        return _insert_events_postgresql(connection, rows)
    seq = event_sequence.c
    allocate = update(event_sequence).where(seq.id == 1).values(
        last_id=seq.last_id + len(rows))
    if dialect == "sqlite":
        last = connection.execute(allocate.returning(seq.last_id)).scalar_one()
    else:  # MySQL/MariaDB: no UPDATE ... RETURNING; the row is locked by the UPDATE
        connection.execute(allocate)
        last = connection.execute(select(seq.last_id).where(seq.id == 1)).scalar_one()
    for number, row in enumerate(rows, start=last - len(rows) + 1):
        row["id"] = number
    return insert_ignore_many(connection, asset_event, rows)


def insert_event_rows(connection: Connection, columns: Sequence[str],
                      rows: list[tuple[Any, ...]]) -> int:
    """:func:`insert_events` for rows given as tuples of ``columns`` (see
    ``EVENT_COLUMNS``), as the unit-of-work writer builds them: a dict per row cost it
    more than the insert itself on SQLite. SQLite takes them as they are, through the
    driver's ``executemany``; the other dialects get the dicts ``insert_events`` takes.
    Call it last in the transaction, like ``insert_events``."""
    if not rows:
        return 0
    if connection.dialect.name != "sqlite":
        return insert_events(connection, [dict(zip(columns, row, strict=True))
                                          for row in rows])
    seq = event_sequence.c
    last = connection.execute(update(event_sequence).where(seq.id == 1).values(
        last_id=seq.last_id + len(rows)).returning(seq.last_id)).scalar_one()
    values = bound_columns(connection, asset_event, columns, rows)
    params = list(zip(range(last - len(rows) + 1, last + 1), *values, strict=True))
    return insert_ignore_tuples(connection, asset_event, ["id", *columns], params)


def _insert_events_postgresql(connection: Connection, rows: list[dict[str, Any]]) -> int:
    """PostgreSQL: the ids, the notification and the rows in ONE statement.

    The ``UPDATE`` of the sequence row (a data-modifying CTE, always run in full) takes
    its lock, hands out the ids and queues the notification, delivered at the commit;
    the insert numbers the JSON rows in array order (``WITH ORDINALITY``) from there.
    Two statements cost one more round trip per batch (measured: 18% of the writer's
    time with 500-event batches on a local server). The answer is the first id and how
    many rows were new; ``row["id"]`` is set as the other dialects set it.
    """
    names = [name for name in rows[0] if name != "id"]  # a retried row may hold one
    target, quoted, payload = json_rows(connection, asset_event, rows, names)
    fields = record_fields(connection, asset_event, names)
    sequence = connection.dialect.identifier_preparer.format_table(event_sequence)
    stmt = text(
        f"WITH seq AS (UPDATE {sequence} SET last_id = last_id + :n WHERE id = 1 "
        f"RETURNING last_id - :n AS base, pg_notify('{NOTIFY_CHANNEL}', '')), "
        f"ins AS (INSERT INTO {target} (id, {', '.join(quoted)}) "
        f"SELECT seq.base + r.ordinality, {', '.join(fields)} "
        f"FROM seq, json_populate_recordset(NULL::{target}, CAST(:rows AS json)) "
        "WITH ORDINALITY AS r ON CONFLICT DO NOTHING RETURNING 1) "
        "SELECT (SELECT base FROM seq), (SELECT count(*) FROM ins)")
    base, written = connection.execute(stmt, {"n": len(rows), "rows": payload}).one()
    for number, row in enumerate(rows, start=base + 1):
        row["id"] = number
    return int(written)


def event_query() -> Select[Any]:
    """Events joined with their asset, the columns :func:`event_record` reads."""
    e, a = asset_event.c, asset.c
    return (select(e.id, a.name, a.uri, e.watcher, e.topic, e.topic_id, e.partition, e.offset,
                   e.event_index, e.created_at, e.payload, e.trace_context)
            .join_from(asset_event, asset, e.asset_id == a.id))


def event_record(row: Row[Any]) -> EventRecord:
    return EventRecord(row.id, row.name, row.uri, row.watcher,
                       Coordinates(row.topic, row.topic_id, row.partition, row.offset),
                       row.event_index, row.created_at, json.loads(row.payload),
                       row.trace_context)


def events_after(connection: Connection, cursor: int, *, limit: int,
                 asset_ids: Collection[int] | None = None) -> list[EventRecord]:
    """The first ``limit`` events with an id above ``cursor``, in id (= commit) order;
    only those of ``asset_ids`` when given."""
    query = event_query().where(asset_event.c.id > cursor).order_by(asset_event.c.id).limit(limit)
    if asset_ids is not None:
        query = query.where(asset_event.c.asset_id.in_(list(asset_ids)))
    return [event_record(row) for row in connection.execute(query)]


def events_by_id(connection: Connection, ids: Collection[int]) -> dict[int, EventRecord]:
    """The events with these ids (deleted ones are missing from the answer)."""
    if not ids:
        return {}
    query = event_query().where(asset_event.c.id.in_(list(ids)))
    return {record.id: record for record in map(event_record, connection.execute(query))}


def last_event_id(connection: Connection) -> int:
    """The highest id allocated so far (0 before the first event), committed or not."""
    seq = event_sequence.c
    return int(connection.execute(select(seq.last_id).where(seq.id == 1)).scalar_one())


def newest_id(connection: Connection) -> int:
    """The highest COMMITTED event id (0 if none): a cursor at "now".

    Not the sequence's value: ids allocated to a transaction still running are below
    it, and a cursor there would skip them when they commit.
    """
    found = connection.execute(select(func.max(asset_event.c.id))).scalar()
    return int(found or 0)


def cursor_before(connection: Connection, since: datetime) -> int:
    """A cursor just below the first event created at or after ``since`` (the newest id if
    none is): following from it reaches every such event. Ids and creation times need not
    rise together across writers, so the follower still drops older events it passes."""
    found = connection.execute(
        select(func.min(asset_event.c.id)).where(asset_event.c.created_at >= since)).scalar()
    return newest_id(connection) if found is None else int(found) - 1


# Counts of events stop here: a bounded count costs at most this many index entries
# (about 10 ms on PostgreSQL), where an exact count of a million rows costs ~100 ms.
COUNT_CAP = 100_000


@dataclass(frozen=True, slots=True)
class EventCount:
    """How many events match: ``total`` exactly, or at least ``total`` (``exact`` False)
    when more than :data:`COUNT_CAP` do."""

    total: int
    exact: bool

    def __str__(self) -> str:
        return f"{self.total:,}" if self.exact else f"more than {self.total:,}"


def asset_named(name: str) -> Any:
    """``asset_event.asset_id`` is the id of asset ``name``, as a condition.

    A subquery the server runs first, not a join on the name: with the id known, an
    asset's newest events are a backward range of ``(asset_id, id)``. Through a join the
    planner cannot keep the index's order, and either reads every event of the asset or
    walks every newer event of the others (1.3 s on a million events for an asset whose
    200 events were old, against a millisecond)."""
    return asset_event.c.asset_id == (select(asset.c.id).where(asset.c.name == name)
                                      .scalar_subquery())


def event_filters(*, asset_name: str | None = None, watcher: str | None = None,
                  since: datetime | None = None, after_id: int | None = None) -> list[Any]:
    """The conditions of ``events list`` and the console's event lists."""
    e = asset_event.c
    where = []
    if asset_name is not None:
        where.append(asset_named(asset_name))
    if watcher is not None:
        where.append(e.watcher == watcher)
    if since is not None:
        where.append(e.created_at >= since)
    if after_id is not None:
        where.append(e.id > after_id)
    return where


def count_events(connection: Connection, where: Sequence[Any],
                 cap: int | None = None) -> EventCount:
    """How many events match ``where``, counting no further than ``cap`` (default
    :data:`COUNT_CAP`; see :class:`EventCount`): the same cost on every dialect, whatever
    the table's size."""
    cap = COUNT_CAP if cap is None else cap
    matching = select(asset_event.c.id).where(*where).limit(cap + 1).subquery()
    found = int(connection.execute(select(func.count()).select_from(matching)).scalar_one())
    return EventCount(min(found, cap), found <= cap)


def list_events(
    engine: Engine,
    *,
    asset_name: str | None = None,
    watcher: str | None = None,
    since: datetime | None = None,
    after_id: int | None = None,
    limit: int | None = None,
) -> list[EventRecord]:
    """Events matching every given filter, newest first: in commit order (highest id
    first), as ``events tail``, the console and the destinations see them. ``after_id``
    keeps those whose id is above it (an id is a cursor: ``events tail``)."""
    where = event_filters(asset_name=asset_name, watcher=watcher, since=since,
                          after_id=after_id)
    with engine.connect() as connection:
        return page_events(connection, where, limit)


def page_events(connection: Connection, where: Sequence[Any], limit: int | None, *,
                 few: bool = False) -> list[EventRecord]:
    """The newest ``limit`` events matching ``where`` (see :func:`list_events`).

    ``few``: the caller counted at most :data:`COUNT_CAP` matching events, and no index
    gives them in id order (a watcher's: its only index is the unique key). Then their ids
    are collected first (through that index) and the newest taken from them; the planner
    would otherwise walk the primary key backwards past every newer event of the others,
    expecting the watcher's events to be spread evenly (0.6 s on a million events for a
    watcher whose 200 events were old; an index of its own cost the writer a quarter of its
    insert rate). ``OFFSET 0`` keeps PostgreSQL from folding the collection back in.
    """
    e = asset_event.c
    query = event_query()
    if few:
        matching = select(e.id).where(*where).offset(0).subquery()
        newest = select(matching.c.id).order_by(matching.c.id.desc())
        if limit is not None:
            newest = newest.limit(limit)
        picked = newest.subquery()
        query = query.join(picked, picked.c.id == e.id)
    else:
        query = query.where(*where)
        if limit is not None:
            query = query.limit(limit)
    return [event_record(row) for row in connection.execute(query.order_by(e.id.desc()))]


def clean_events(
    engine: Engine, *, now: datetime, older_than: timedelta, batch_size: int, dry_run: bool
) -> CleanupReport:
    """Delete events created before ``now - older_than``, in batches of ``batch_size``
    (0 = one statement), one transaction per batch; see ``delete_in_batches``."""
    if older_than < timedelta(0):
        raise ValueError("older_than must not be negative")
    if batch_size < 0:
        raise ValueError("batch_size must be >= 0")
    e = asset_event.c
    return delete_in_batches(engine, e.id, e.created_at < now - older_than,
                             batch_size=batch_size, dry_run=dry_run)

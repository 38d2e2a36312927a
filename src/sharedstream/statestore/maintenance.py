"""Operator work on the stores: cleanup of expired task rows, sweep, orphans, stats."""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from sqlalchemy import ColumnElement, LargeBinary, case, cast, delete, func, select
from sqlalchemy.engine import Connection, Engine

from sharedstream.statestore.database import DatabaseBackend
from sharedstream.statestore.models import (
    asset,
    asset_event,
    asset_state_store,
    rejected_message,
    task_state_store,
)
from sharedstream.statestore.payload import StoredObject
from sharedstream.statestore.types import utcnow

SIZE_BUCKETS = (("<=1KiB", 1024), ("<=16KiB", 16 * 1024), ("<=64KiB", 64 * 1024))


@dataclass(frozen=True)
class CleanupReport:
    rows: int
    batches: int
    seconds: float
    dry_run: bool = False
    skipped: str | None = None


def cleanup(backend: DatabaseBackend, batch_size: int, dry_run: bool) -> CleanupReport:
    """Delete task rows expired at the start of the run; asset rows are never touched.

    Rows expiring after the start are left for the next run, which keeps the run finite
    while writers keep writing. Payload objects of deleted rows are removed after each
    batch commits (never before: a rolled-back batch must keep its objects).
    """

    def delete_rows(connection: Connection, condition: ColumnElement[bool]) -> AfterCommit:
        deleted, refs = backend.delete_task_rows(connection, condition)
        return deleted, functools.partial(backend.delete_payloads, refs)

    t = task_state_store.c
    return delete_in_batches(backend.engine, t.id, t.expires_at <= backend.clock(),
                             batch_size=batch_size, dry_run=dry_run, delete_rows=delete_rows)


# A batch's deleted row count and what to do once its transaction has committed.
AfterCommit = tuple[int, Callable[[], None]]
RowDeleter = Callable[[Connection, ColumnElement[bool]], AfterCommit]


def delete_in_batches(
    engine: Engine,
    id_column: ColumnElement[Any],
    condition: ColumnElement[bool],
    *,
    batch_size: int,
    dry_run: bool,
    delete_rows: RowDeleter | None = None,
) -> CleanupReport:
    """Delete the rows of ``id_column``'s table matching ``condition``.

    ``batch_size`` 0 deletes in one statement. Otherwise each batch selects up to
    ``batch_size`` ids (in id order) and deletes them in its own short transaction, so
    writers wait for one batch at most, and an interrupted cleanup keeps the batches
    already committed. The caller fixes any time cutoff inside ``condition`` once,
    before the run, so rows that start matching meanwhile cannot keep it going forever.
    ``delete_rows`` replaces the plain DELETE when rows own something outside the
    database (task payload objects); a dry run counts and deletes nothing.
    """
    table = id_column.table
    if delete_rows is None:
        def delete_rows(connection: Connection, where: ColumnElement[bool]) -> AfterCommit:
            return connection.execute(delete(table).where(where)).rowcount, _nothing

    started = time.perf_counter()
    if dry_run:
        with engine.connect() as connection:
            rows = int(connection.execute(
                select(func.count()).select_from(table).where(condition)).scalar_one())
        batches = 0 if rows == 0 else (1 if batch_size == 0 else math.ceil(rows / batch_size))
        return CleanupReport(rows, batches, time.perf_counter() - started, dry_run=True)
    if batch_size == 0:
        with engine.begin() as connection:
            rows, after_commit = delete_rows(connection, condition)
        after_commit()
        return CleanupReport(rows, 1 if rows else 0, time.perf_counter() - started)
    rows = batches = 0
    while True:
        with engine.begin() as connection:
            ids = list(connection.execute(
                select(id_column).where(condition).order_by(id_column).limit(batch_size)
            ).scalars())
            if not ids:
                break
            deleted, after_commit = delete_rows(connection, id_column.in_(ids))
        after_commit()
        rows += deleted
        batches += 1
    return CleanupReport(rows, batches, time.perf_counter() - started)


def _nothing() -> None:
    """Plain rows own nothing outside the database."""


@dataclass(frozen=True)
class SweepReport:
    assets: list[str]
    rows: int
    dry_run: bool


def sweep(backend: DatabaseBackend, inactive_for: timedelta, dry_run: bool) -> SweepReport:
    """Remove the state of assets deactivated at least ``inactive_for`` ago (rows of the
    asset itself and its events stay; an asset reactivated meanwhile is not touched)."""
    if inactive_for < timedelta(0):
        raise ValueError("inactive_for must not be negative")
    cutoff = backend.clock() - inactive_for
    a, s = asset.c, asset_state_store.c
    stale = (a.active.is_(False)) & (a.deactivated_at <= cutoff)
    with backend.engine.begin() as connection:
        found = connection.execute(select(a.id, a.name).where(stale).order_by(a.name)).all()
        ids = [row.id for row in found]
        if not ids:
            return SweepReport([], 0, dry_run)
        if dry_run:
            rows = connection.execute(
                select(func.count()).select_from(asset_state_store).where(s.asset_id.in_(ids))
            ).scalar_one()
        else:
            # Re-check inactivity in the DELETE itself: an asset reactivated between the
            # SELECT and here keeps its state.
            rows = connection.execute(delete(asset_state_store).where(
                s.asset_id.in_(select(a.id).where(stale, a.id.in_(ids)).scalar_subquery())
            )).rowcount
    return SweepReport([row.name for row in found], rows, dry_run)


@dataclass(frozen=True)
class OrphanReport:
    orphans: list[StoredObject] = field(default_factory=list)
    deleted: int = 0


def orphans(backend: DatabaseBackend, delete_them: bool, min_age: timedelta) -> OrphanReport:
    """Payload objects no row references (both slots of a key end in ``.json``).
    Objects younger than ``min_age`` are skipped: a ``set`` writes its object under its
    row's lock and points the row at it in the same transaction, so until that commits
    the object is unreferenced; ``min_age`` must exceed how long such a transaction
    lasts (a set waiting for its lock has written nothing yet)."""
    if backend.payload is None:
        raise ValueError("no [workers] state_backend is configured: there are no payloads")
    newest = utcnow() - min_age
    candidates = [o for o in backend.payload.list_objects() if o.modified_at <= newest]
    t = task_state_store.c
    referenced: set[str] = set()
    with backend.engine.connect() as connection:
        for start in range(0, len(candidates), 500):
            chunk = [o.ref for o in candidates[start:start + 500]]
            referenced.update(connection.execute(
                select(t.payload_ref).where(t.payload_ref.in_(chunk))
            ).scalars())
    found = [o for o in candidates if o.ref not in referenced]
    if delete_them:
        backend.delete_payloads([o.ref for o in found])
    return OrphanReport(found, len(found) if delete_them else 0)


def _byte_length(connection: Connection, column: Any) -> ColumnElement[Any]:
    name = connection.dialect.name
    if name == "postgresql":
        return func.octet_length(column)
    if name == "sqlite":
        return func.length(cast(column, LargeBinary))
    return func.length(column)  # MySQL/MariaDB: LENGTH counts bytes


def _size_distribution(connection: Connection, table: Any, column: Any) -> dict[str, Any]:
    size = _byte_length(connection, column)
    columns: list[Any] = [func.count(column), func.min(size), func.max(size), func.avg(size)]
    lower = 0
    for _label, upper in SIZE_BUCKETS:
        columns.append(func.sum(case(((size > lower) & (size <= upper), 1), else_=0)))
        lower = upper
    columns.append(func.sum(case((size > lower, 1), else_=0)))
    row = connection.execute(select(*columns).select_from(table)).one()
    labels = [label for label, _ in SIZE_BUCKETS] + [f">{SIZE_BUCKETS[-1][0][2:]}"]
    return {
        "values_in_database": row[0],
        "min_bytes": row[1] or 0,
        "max_bytes": row[2] or 0,
        "avg_bytes": round(float(row[3] or 0), 1),
        "buckets": {label: int(n or 0) for label, n in zip(labels, row[4:], strict=True)},
    }


def stats(backend: DatabaseBackend) -> dict[str, Any]:
    """Row counts per store, expired-but-not-deleted task rows, payload size distribution."""
    now = backend.clock()
    t, a = task_state_store.c, asset.c
    with backend.engine.connect() as connection:
        def count(table: Any, *where: ColumnElement[bool]) -> int:
            query = select(func.count()).select_from(table)
            return int(connection.execute(query.where(*where) if where else query).scalar_one())

        result: dict[str, Any] = {
            "task_state_store": {
                "rows": count(task_state_store),
                "expired_not_deleted": count(task_state_store, t.expires_at <= now),
                "never_expire": count(task_state_store, t.expires_at.is_(None)),
                "payload_refs": count(task_state_store, t.payload_ref.is_not(None)),
                "sizes": _size_distribution(connection, task_state_store, t.value),
            },
            "asset_state_store": {
                "rows": count(asset_state_store),
                "sizes": _size_distribution(connection, asset_state_store,
                                            asset_state_store.c.value),
            },
            "assets": {"active": count(asset, a.active.is_(True)),
                       "inactive": count(asset, a.active.is_(False))},
            "asset_events": count(asset_event),
            "rejected_messages": count(rejected_message),
        }
    return result

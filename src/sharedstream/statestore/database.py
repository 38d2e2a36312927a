"""The default backend: both stores in the SQL database, optionally payloads in files."""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import (
    ColumnElement,
    LargeBinary,
    and_,
    bindparam,
    cast,
    delete,
    func,
    or_,
    select,
    tuple_,
    update,
)
from sqlalchemy import text as sql_text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError

from sharedstream.statestore.backend import StateBackend, StateEntry
from sharedstream.statestore.comparison import is_forward
from sharedstream.statestore.models import asset, asset_state_store, task_state_store
from sharedstream.statestore.payload import PayloadBackend
from sharedstream.statestore.scopes import AssetScope, TaskScope, Writer
from sharedstream.statestore.settings import StateStoreSettings
from sharedstream.statestore.sql import insert_if_absent, upsert
from sharedstream.statestore.staging import (
    MISSING,
    StagedAdvance,
    StagedDelete,
    StagedSet,
    StagedWrites,
)
from sharedstream.statestore.values import decode_value

# A compare-and-swap attempt fails only when another writer committed in between, so the
# loop always makes global progress; the cap turns a bug into an error instead of a hang.
MAX_CAS_ATTEMPTS = 1000

AfterCommit = Callable[[], None]

# Bounds of what a backend remembers between units of work (see DatabaseBackend): past
# them it forgets everything and checks again, which costs one query or locked read.
MAX_LIVE_ASSET_IDS = 10_000
MAX_WATERMARKS = 100_000


class Watermark(NamedTuple):
    """An ``asset_state_store`` row as a committed unit of work left it."""

    version: int
    text: str
    value: Any


def task_scope_filter(scope: TaskScope, all_map_indices: bool = False) -> ColumnElement[bool]:
    t = task_state_store.c
    condition = and_(t.dag_id == scope.dag_id, t.run_id == scope.run_id,
                     t.task_id == scope.task_id)
    return condition if all_map_indices else and_(condition, t.map_index == scope.map_index)


class DatabaseBackend(StateBackend):
    """State rows in the configured database; writes are single-statement upserts.

    With a payload backend, task values live in objects and rows hold their reference
    (see ``sharedstream.statestore.payload`` for the write order and its failure windows).
    Asset state always stays in the database: it must commit atomically with events and
    ``advance`` is a compare-and-swap, neither of which an external object store can join.
    """

    def __init__(
        self,
        *,
        engine: Engine,
        settings: StateStoreSettings,
        clock: Callable[[], datetime],
        payload: PayloadBackend | None = None,
    ) -> None:
        super().__init__(engine=engine, settings=settings, clock=clock)
        self.payload = payload
        # Units of work name the triggerer's assets by id and advance the same keys batch
        # after batch; these spare them the id check and the locked read (see
        # _asset_ids and _swap_remembered). Plain dict/set operations: several writer
        # threads may share a backend, and a stale entry only costs a slower path.
        self._live_asset_ids: set[int] = set()
        self._watermarks: dict[tuple[int, str], Watermark] = {}

    # -- assets -----------------------------------------------------------------------------

    def asset_id(self, connection: Connection, scope: AssetScope, create: bool) -> int | None:
        """Resolve ``scope`` to ``asset.id``; with ``create`` a new name gets a row."""
        a = asset.c
        if scope.asset_id is not None:
            found = connection.execute(select(a.id).where(a.id == scope.asset_id)).scalar()
        elif scope.uri is not None:
            ids = connection.execute(select(a.id).where(a.uri == scope.uri).limit(2)).scalars()
            matches = list(ids)
            if len(matches) > 1:
                raise LookupError(f"several assets have uri {scope.uri!r}; use name=")
            found = matches[0] if matches else None
        else:
            found = connection.execute(select(a.id).where(a.name == scope.name)).scalar()
        if found is None and create:
            if scope.name is None:
                raise LookupError(f"no asset {scope.label()}; only name= creates an asset")
            now = self.clock()
            insert_if_absent(connection, asset, {
                "name": scope.name, "uri": None, "active": True, "deactivated_at": None,
                "created_at": now, "updated_at": now,
            })
            # A locking read: when another transaction created the asset after this one's
            # first read, MySQL's repeatable-read snapshot does not show its row (the insert
            # saw the duplicate key, a plain SELECT would find nothing).
            found = connection.execute(select(a.id).where(a.name == scope.name)
                                       .with_for_update(read=True)).scalar_one()
        return found

    # -- task store -------------------------------------------------------------------------

    def _not_expired(self) -> ColumnElement[bool]:
        t = task_state_store.c
        return or_(t.expires_at.is_(None), t.expires_at > self.clock())

    def _decode_task(self, value: str | None, ref: str | None) -> Any:
        if ref is not None:
            if self.payload is None:
                raise RuntimeError(
                    f"row references payload {ref!r} but no [workers] state_backend is set"
                )
            return decode_value(self.payload.read(ref))
        assert value is not None, "the value_or_ref check constraint guarantees one"
        return decode_value(value)

    def task_get(self, scope: TaskScope, key: str) -> Any:
        t = task_state_store.c
        with self.engine.connect() as connection:
            row = connection.execute(
                select(t.value, t.payload_ref).where(
                    task_scope_filter(scope), t.key == key, self._not_expired()
                )
            ).first()
        return MISSING if row is None else self._decode_task(row.value, row.payload_ref)

    def _task_rows(
        self, scope: TaskScope, writes: Sequence[tuple[str, str, datetime | None]]
    ) -> list[dict[str, Any]]:
        """Rows for ``writes`` of (key, text, expires_at); payload objects written first."""
        now = self.clock()
        rows = []
        for key, text, expires_at in writes:
            ref = None
            if self.payload is not None:
                ref = self.payload.reference(scope, key)
                self.payload.write(ref, text)
            rows.append({
                "dag_id": scope.dag_id, "run_id": scope.run_id, "task_id": scope.task_id,
                "map_index": scope.map_index, "key": key,
                "value": None if ref else text, "payload_ref": ref,
                "updated_at": now, "expires_at": expires_at,
            })
        return rows

    @staticmethod
    def _upsert_task_rows(connection: Connection, rows: list[dict[str, Any]]) -> None:
        upsert(connection, task_state_store, rows,
               conflict=("dag_id", "run_id", "task_id", "map_index", "key"),
               update=("value", "payload_ref", "updated_at", "expires_at"))

    def task_set(
        self, scope: TaskScope, key: str, value: Any, text: str, expires_at: datetime | None
    ) -> None:
        rows = self._task_rows(scope, [(key, text, expires_at)])
        with self.engine.begin() as connection:
            self._upsert_task_rows(connection, rows)

    def delete_task_rows(
        self, connection: Connection, condition: ColumnElement[bool]
    ) -> tuple[int, list[str]]:
        """Delete rows matching ``condition``; return the count and their payload refs,
        whose objects the caller removes only after the transaction commits."""
        t = task_state_store.c
        refs: list[str] = []
        if self.payload is not None:
            refs = [r for r in connection.execute(
                select(t.payload_ref).where(condition, t.payload_ref.is_not(None))
            ).scalars() if r is not None]
        deleted = connection.execute(delete(task_state_store).where(condition)).rowcount
        return deleted, refs

    def delete_payloads(self, refs: Sequence[str]) -> None:
        """Remove the objects of deleted rows, after their transaction committed.

        A ref that a row references again (a concurrent ``set`` of the same key since the
        delete) is kept. The remaining window is a ``set`` that has written its object but
        not yet committed its row: its object can be removed under it, and a later read of
        that key raises FileNotFoundError until the key is set again.
        """
        if self.payload is None or not refs:
            return
        t = task_state_store.c
        with self.engine.connect() as connection:
            live = set(connection.execute(
                select(t.payload_ref).where(t.payload_ref.in_(sorted(set(refs))))
            ).scalars())
        for ref in set(refs) - live:
            self.payload.delete(ref)

    def task_delete(self, scope: TaskScope, key: str) -> bool:
        with self.engine.begin() as connection:
            deleted, refs = self.delete_task_rows(
                connection, and_(task_scope_filter(scope), task_state_store.c.key == key)
            )
        self.delete_payloads(refs)
        return deleted > 0

    def task_clear(self, scope: TaskScope, all_map_indices: bool) -> int:
        with self.engine.begin() as connection:
            deleted, refs = self.delete_task_rows(
                connection, task_scope_filter(scope, all_map_indices)
            )
        self.delete_payloads(refs)
        return deleted

    def task_items(self, scope: TaskScope) -> list[StateEntry]:
        t = task_state_store.c
        with self.engine.connect() as connection:
            rows = connection.execute(
                select(t.key, t.value, t.payload_ref, t.updated_at, t.expires_at)
                .where(task_scope_filter(scope), self._not_expired())
                .order_by(t.key)
            ).all()
        entries = []
        for row in rows:
            value = self._decode_task(row.value, row.payload_ref)
            size = len((row.value or "").encode("utf-8"))
            if row.payload_ref is not None and self.payload is not None:
                size = len(self.payload.read(row.payload_ref).encode("utf-8"))
            entries.append(StateEntry(
                key=row.key, value=value, size=size, updated_at=row.updated_at,
                expires_at=row.expires_at, payload_ref=row.payload_ref,
            ))
        return entries

    # -- asset store ------------------------------------------------------------------------

    def asset_get(self, scope: AssetScope, key: str) -> Any:
        s = asset_state_store.c
        with self.engine.connect() as connection:
            asset_id = self.asset_id(connection, scope, create=False)
            if asset_id is None:
                return MISSING
            text = connection.execute(
                select(s.value).where(s.asset_id == asset_id, s.key == key)
            ).scalar()
        return MISSING if text is None else decode_value(text)

    def _asset_row(self, asset_id: int, key: str, text: str, writer: Writer) -> dict[str, Any]:
        return {
            "asset_id": asset_id, "key": key, "value": text, "version": 1,
            "updated_at": self.clock(), "writer_kind": writer.kind, "writer_id": writer.identity,
        }

    @staticmethod
    def _upsert_asset_rows(connection: Connection, rows: list[dict[str, Any]]) -> None:
        upsert(connection, asset_state_store, rows, conflict=("asset_id", "key"),
               update=("value", "updated_at", "writer_kind", "writer_id"),
               extra={"version": asset_state_store.c.version + 1})

    def asset_set(self, scope: AssetScope, key: str, value: Any, text: str,
                  writer: Writer) -> None:
        with self.engine.begin() as connection:
            asset_id = self.asset_id(connection, scope, create=True)
            assert asset_id is not None
            self._upsert_asset_rows(connection, [self._asset_row(asset_id, key, text, writer)])

    def asset_delete(self, scope: AssetScope, key: str) -> bool:
        s = asset_state_store.c
        with self.engine.begin() as connection:
            asset_id = self.asset_id(connection, scope, create=False)
            if asset_id is None:
                return False
            result = connection.execute(
                delete(asset_state_store).where(s.asset_id == asset_id, s.key == key)
            )
        return result.rowcount > 0

    def asset_clear(self, scope: AssetScope) -> int:
        with self.engine.begin() as connection:
            asset_id = self.asset_id(connection, scope, create=False)
            if asset_id is None:
                return 0
            result = connection.execute(
                delete(asset_state_store).where(asset_state_store.c.asset_id == asset_id)
            )
        return result.rowcount

    def asset_items(self, scope: AssetScope) -> list[StateEntry]:
        s = asset_state_store.c
        with self.engine.connect() as connection:
            asset_id = self.asset_id(connection, scope, create=False)
            if asset_id is None:
                return []
            rows = connection.execute(
                select(s.key, s.value, s.updated_at, s.writer_kind, s.writer_id)
                .where(s.asset_id == asset_id).order_by(s.key)
            ).all()
        return [
            StateEntry(key=r.key, value=decode_value(r.value), size=len(r.value.encode("utf-8")),
                       updated_at=r.updated_at, writer_kind=r.writer_kind, writer_id=r.writer_id)
            for r in rows
        ]

    def _advance_once(
        self, connection: Connection, asset_id: int, key: str, value: Any, text: str,
        writer: Writer, lock: bool,
    ) -> bool | None:
        """One compare-and-swap attempt: True moved, False not forwards, None lost a race.

        The comparison runs in Python (JSON ordering rules SQL cannot express), so the
        swap is guarded by the row's version: ``UPDATE ... WHERE version = :seen`` matches
        nothing if anyone wrote since the read. An absent key is claimed by an insert that
        does nothing on conflict. ``lock`` adds ``FOR UPDATE``: needed inside a long
        transaction on MySQL, whose repeatable-read snapshot would otherwise show the same
        stale version forever.
        """
        s = asset_state_store.c
        query = select(s.value, s.version).where(s.asset_id == asset_id, s.key == key)
        row = connection.execute(query.with_for_update() if lock else query).first()
        if row is None:
            inserted = insert_if_absent(
                connection, asset_state_store, self._asset_row(asset_id, key, text, writer)
            )
            return True if inserted else None
        if not is_forward(value, decode_value(row.value)):
            return False
        result = connection.execute(
            update(asset_state_store)
            .where(s.asset_id == asset_id, s.key == key, s.version == row.version)
            .values(value=text, version=row.version + 1, updated_at=self.clock(),
                    writer_kind=writer.kind, writer_id=writer.identity)
        )
        return True if result.rowcount == 1 else None

    def _advance_in(self, connection: Connection, asset_id: int, key: str, value: Any,
                    text: str, writer: Writer, lock: bool) -> bool:
        for _ in range(MAX_CAS_ATTEMPTS):
            outcome = self._advance_once(connection, asset_id, key, value, text, writer, lock)
            if outcome is not None:
                return outcome
        raise RuntimeError(f"advance of {key!r} lost {MAX_CAS_ATTEMPTS} races in a row")

    def asset_advance(self, scope: AssetScope, key: str, value: Any, text: str,
                      writer: Writer) -> bool:
        # Each attempt is its own short transaction so a retry reads fresh data on every
        # dialect and isolation level.
        for _ in range(MAX_CAS_ATTEMPTS):
            with self.engine.begin() as connection:
                asset_id = self.asset_id(connection, scope, create=True)
                assert asset_id is not None
                outcome = self._advance_once(connection, asset_id, key, value, text, writer,
                                             lock=False)
            if outcome is not None:
                return outcome
        raise RuntimeError(f"advance of {key!r} lost {MAX_CAS_ATTEMPTS} races in a row")

    # -- units of work ----------------------------------------------------------------------

    def apply_staged(self, connection: Connection, staged: StagedWrites) -> list[AfterCommit]:
        """Write ``staged`` inside the caller's transaction with few statements: per scope
        one clear, one multi-key delete, one multi-row upsert; advances are re-checked
        under a row lock, or guarded by the row remembered from the last commit (see
        :meth:`_apply_advances`). Payload objects of deleted task keys are removed, and
        the rows left by this unit's advances remembered, only after the caller commits
        (the returned callables), so a rollback never loses a payload nor leaves a row
        remembered that was never committed."""
        refs: list[str] = []
        for group in sorted(staged.cleared_task_groups):
            refs += self.delete_task_rows(
                connection, task_scope_filter(TaskScope(*group), all_map_indices=True)
            )[1]
        for task_scope, task in staged.tasks.items():
            refs += self._apply_task(connection, task_scope, task.cleared, task.ops)
        if self.payload is not None:
            # A key deleted or cleared and then set again in one unit keeps its object
            # (references are deterministic), so it must not be removed after commit.
            rewritten = {self.payload.reference(scope, key)
                         for scope, task in staged.tasks.items()
                         for key, op in task.ops.items() if isinstance(op, StagedSet)}
            refs = [ref for ref in refs if ref not in rewritten]
        asset_ids = self._asset_ids(connection, list(staged.assets))
        try:
            marks = self._apply_assets(connection, staged, asset_ids)
        except IntegrityError as exc:
            gone = self._forget_missing(asset_ids.values())
            if gone:
                raise LookupError(f"no asset id={gone[0]}; it was deleted while in use, "
                                  "only name= creates an asset") from exc
            raise
        after: list[AfterCommit] = [lambda: self._remember(marks)] if marks else []
        return after + ([lambda: self.delete_payloads(refs)] if refs else [])

    def _apply_assets(self, connection: Connection, staged: StagedWrites,
                      asset_ids: dict[AssetScope, int]) -> dict[tuple[int, str], Watermark]:
        """The asset part of :meth:`apply_staged`; the watermarks to remember after commit."""
        advances: list[tuple[int, str, StagedAdvance]] = []
        s = asset_state_store.c
        for asset_scope, asset_staging in staged.assets.items():
            asset_id = asset_ids[asset_scope]
            if asset_staging.cleared:
                connection.execute(delete(asset_state_store).where(s.asset_id == asset_id))
            ops = asset_staging.ops
            deleted = [k for k, op in ops.items() if isinstance(op, StagedDelete)]
            if deleted:
                connection.execute(delete(asset_state_store).where(
                    s.asset_id == asset_id, s.key.in_(deleted)))
            rows = [self._asset_row(asset_id, k, op.text, op.writer)
                    for k, op in ops.items() if isinstance(op, StagedSet) and op.writer]
            self._upsert_asset_rows(connection, rows)
            advances += [(asset_id, k, op) for k, op in ops.items()
                         if isinstance(op, StagedAdvance)]
        return self._apply_advances(connection, advances)

    def _forget_missing(self, asset_ids: Collection[int]) -> list[int]:
        """Which of ``asset_ids`` no longer exist (read on a connection of its own: the
        failed transaction may not run another statement); forget them, and return them.

        An id is remembered once seen, so a unit of work writing state for an asset deleted
        since fails on ``asset_state_store``'s foreign key, a constraint error, which the
        writer would dead-letter; this turns it back into the "no asset" lookup error a
        fresh check raises, which the writer holds and retries."""
        with self.engine.connect() as connection:
            found = set(connection.execute(
                select(asset.c.id).where(asset.c.id.in_(sorted(set(asset_ids))))).scalars())
        gone = sorted(set(asset_ids) - found)
        for asset_id in gone:
            self._live_asset_ids.discard(asset_id)
        if gone:
            self._watermarks.clear()
        return gone

    def _remember(self, marks: dict[tuple[int, str], Watermark]) -> None:
        """After a commit: the rows its advances left, for the next unit's guarded swap."""
        if len(self._watermarks) + len(marks) > MAX_WATERMARKS:
            self._watermarks.clear()
        self._watermarks.update(marks)

    def _asset_ids(self, connection: Connection,
                   scopes: Sequence[AssetScope]) -> dict[AssetScope, int]:
        """Resolve every scope of a unit; scopes given by id (the triggerer's) in one query,
        or none once every id has been seen to exist (remembered for the backend's life).

        An id that does not exist, and every scope by name or uri, goes through
        :meth:`asset_id`, which creates a named asset or raises for an unknown id. A
        remembered id whose asset was deleted since is caught by the state rows' foreign
        key instead (see :meth:`_forget_missing`).
        """
        by_id = {scope.asset_id for scope in scopes if scope.asset_id is not None}
        unchecked = by_id - self._live_asset_ids
        if unchecked:
            exist = set(connection.execute(
                select(asset.c.id).where(asset.c.id.in_(sorted(unchecked)))).scalars())
            if len(self._live_asset_ids) + len(exist) > MAX_LIVE_ASSET_IDS:
                self._live_asset_ids.clear()
            self._live_asset_ids |= exist
        known = by_id & self._live_asset_ids
        resolved: dict[AssetScope, int] = {}
        for scope in scopes:
            found = scope.asset_id if scope.asset_id in known else None
            if found is None:
                found = self.asset_id(connection, scope, create=True)
                assert found is not None
            resolved[scope] = found
        return resolved

    def _apply_advances(self, connection: Connection,
                        advances: Sequence[tuple[int, str, StagedAdvance]]
                        ) -> dict[tuple[int, str], Watermark]:
        """Every staged advance of a unit: one guarded UPDATE when every key is remembered
        (:meth:`_swap_remembered`), else three statements instead of two per key. Returns
        the rows the advances leave, to remember once the transaction commits.

        One ``SELECT ... FOR UPDATE`` reads and locks all existing rows (in key order, so
        two units locking overlapping keys cannot deadlock); the comparisons run in Python;
        one executemany UPDATE, each row still guarded by the version it was read at, swaps
        the ones that move forwards. Under the row locks nobody can write in between, so
        every guarded update matches; where the dialect takes no row locks (SQLite) or
        cannot report an executemany's row count, a write in between is caught and those
        keys are redone one at a time by the per-key compare-and-swap, which is idempotent
        (a key already swapped compares equal and stays).

        Absent keys need the per-key path (a key is absent once in its life, and MySQL's
        insert count cannot tell a concurrent insert from ours). Locking the existing keys
        first and then inserting an absent *lower* key would take locks out of key order
        and deadlock against a unit that locks them in order; so when any key is absent
        (checked without locks), the whole unit takes the per-key path in key order.
        """
        if not advances:
            return {}
        wanted = {(asset_id, key): op for asset_id, key, op in advances}
        swapped_remembered = self._swap_remembered(connection, wanted)
        if swapped_remembered is not None:
            return swapped_remembered
        s = asset_state_store.c
        present = connection.execute(
            select(func.count()).select_from(asset_state_store)
            .where(tuple_(s.asset_id, s.key).in_(list(wanted)))).scalar_one()
        if present < len(wanted):
            for (asset_id, key), op in sorted(wanted.items()):
                self._advance_in(connection, asset_id, key, op.value, op.text, op.writer,
                                 lock=True)
            return {}  # versions unknown here: the next unit takes this path once more
        existing = connection.execute(
            select(s.asset_id, s.key, s.value, s.version)
            .where(tuple_(s.asset_id, s.key).in_(sorted(wanted)))
            .order_by(s.asset_id, s.key)
            .with_for_update()
        ).all()
        now = self.clock()
        forwards: list[tuple[tuple[int, str], StagedAdvance]] = []
        swaps: list[dict[str, Any]] = []
        marks: dict[tuple[int, str], Watermark] = {}
        for row in existing:
            ident = (row.asset_id, row.key)
            op = wanted.pop(ident)
            current = decode_value(row.value)
            if is_forward(op.value, current):
                forwards.append((ident, op))
                swaps.append(self._swap_params(ident, row.version, op, now))
                marks[ident] = Watermark(row.version + 1, op.text, op.value)
            else:
                marks[ident] = Watermark(row.version, row.value, current)
        redo = list(wanted.items())  # absent when read
        if swaps and self._swap(connection, swaps, by_value=False) != len(swaps):
            redo += forwards
        for ident, _ in redo:
            marks.pop(ident, None)
        for (asset_id, key), op in sorted(redo, key=lambda item: item[0]):
            self._advance_in(connection, asset_id, key, op.value, op.text, op.writer, lock=True)
        return marks

    def _swap_remembered(self, connection: Connection,
                         wanted: dict[tuple[int, str], StagedAdvance]
                         ) -> dict[tuple[int, str], Watermark] | None:
        """The steady state of a watermark in one statement: when every key of the unit
        is remembered from an earlier commit and every advance moves forwards of the
        remembered value, one executemany UPDATE swaps them, each guarded by the
        remembered version AND value (a key deleted and written again starts at version 1
        again; on MySQL/MariaDB the value compares as bytes, not by the column's
        case-insensitive collation). If another writer changed any row since, its guard
        matches nothing and this returns None: the caller's locked path then runs for the
        whole unit, where the keys swapped here compare equal to themselves and stay.

        The UPDATE locks rows in key order, as the locked path does. A backward or equal
        advance against the remembered value also goes to the locked path, since a
        ``set`` elsewhere may have moved the key back since. ``wanted`` is not changed.
        """
        marks: dict[tuple[int, str], Watermark] = {}
        swaps: list[dict[str, Any]] = []
        now = self.clock()
        for ident, op in sorted(wanted.items()):
            mark = self._watermarks.get(ident)
            if mark is None or not is_forward(op.value, mark.value):
                return None
            params = self._swap_params(ident, mark.version, op, now)
            params["b_seen_value"] = mark.text
            swaps.append(params)
            marks[ident] = Watermark(mark.version + 1, op.text, op.value)
        return marks if self._swap(connection, swaps, by_value=True) == len(swaps) else None

    @staticmethod
    def _swap_params(ident: tuple[int, str], seen: int, op: StagedAdvance,
                     now: datetime) -> dict[str, Any]:
        return {"b_asset_id": ident[0], "b_key": ident[1], "b_seen": seen,
                "b_value": op.text, "b_version": seen + 1, "b_updated_at": now,
                "b_writer_kind": op.writer.kind, "b_writer_id": op.writer.identity}

    @staticmethod
    def _swap(connection: Connection, swaps: list[dict[str, Any]], *,
              by_value: bool) -> int | None:
        """Swap each advanced key of ``swaps`` (:meth:`_swap_params`) if its row is still at
        the version it was seen at (and, ``by_value``, at the value too); how many rows
        were swapped, or None where the driver cannot count an executemany's rows.

        PostgreSQL: ONE statement, ``UPDATE ... FROM json_to_recordset(:rows)``, as the
        events are sent (an executemany is a statement per key). Its join visits the rows
        in the array's order, which is key order; the locked path's ``FOR UPDATE`` orders
        explicitly. MySQL/MariaDB compare the value as bytes (their text collation is
        case-insensitive); the others compare text exactly."""
        s = asset_state_store.c
        if connection.dialect.name == "postgresql":
            target = connection.dialect.identifier_preparer.format_table(asset_state_store)
            rows = [dict(row, b_updated_at=row["b_updated_at"].isoformat()) for row in swaps]
            stmt = sql_text(
                f"UPDATE {target} AS s SET value = r.b_value, version = r.b_version, "
                "updated_at = r.b_updated_at, writer_kind = r.b_writer_kind, "
                "writer_id = r.b_writer_id "
                "FROM json_to_recordset(CAST(:rows AS json)) AS r(b_asset_id integer, "
                "b_key text, b_seen bigint, b_seen_value text, b_value text, "
                "b_version bigint, b_updated_at timestamptz, b_writer_kind text, "
                "b_writer_id text) "
                "WHERE s.asset_id = r.b_asset_id AND s.key = r.b_key "
                "AND s.version = r.b_seen"
                + (" AND s.value = r.b_seen_value" if by_value else "")
            ).execution_options(preserve_rowcount=True)
            return int(connection.execute(
                stmt, {"rows": json.dumps(rows, separators=(",", ":"))}).rowcount)
        guard = [s.asset_id == bindparam("b_asset_id"), s.key == bindparam("b_key"),
                 s.version == bindparam("b_seen")]
        if by_value:
            seen: Any = bindparam("b_seen_value")
            if connection.dialect.name in ("mysql", "mariadb"):
                guard.append(cast(s.value, LargeBinary) == cast(seen, LargeBinary))
            else:
                guard.append(s.value == seen)
        swapped = connection.execute(
            update(asset_state_store).where(*guard)
            .values(value=bindparam("b_value"), version=bindparam("b_version"),
                    updated_at=bindparam("b_updated_at"),
                    writer_kind=bindparam("b_writer_kind"),
                    writer_id=bindparam("b_writer_id")),
            swaps).rowcount
        return int(swapped) if connection.dialect.supports_sane_multi_rowcount else None

    def _apply_task(self, connection: Connection, scope: TaskScope, cleared: bool,
                    ops: dict[str, StagedSet | StagedDelete]) -> list[str]:
        t = task_state_store.c
        refs: list[str] = []
        if cleared:
            refs += self.delete_task_rows(connection, task_scope_filter(scope))[1]
        deleted = [k for k, op in ops.items() if isinstance(op, StagedDelete)]
        if deleted:
            refs += self.delete_task_rows(
                connection, and_(task_scope_filter(scope), t.key.in_(deleted)))[1]
        writes = [(k, op.text, op.expires_at) for k, op in ops.items()
                  if isinstance(op, StagedSet)]
        self._upsert_task_rows(connection, self._task_rows(scope, writes))
        return refs

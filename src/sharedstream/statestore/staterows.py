"""What the backend's single calls and its units of work both write with: the asset a
scope names, the rows of the two state tables, and the statements that write and delete them.

Both paths build rows here, so a key is written the same way by a single call and by a
unit of work: one upsert per table and batch, never a read-then-write.
An asset row starts at version 1 and every upsert bumps it, which is what the guarded
swaps of ``compareswap.py`` compare against.

Failure windows (task payloads, see ``sharedstream.statestore.payload``): a set locks its
row first, then writes the slot the row does not reference, then points the row at it, so
a write that does not commit changes no object a row references and a crash before the
commit leaves an orphan, never a row without its object; the old slot of a set, and both
slots of a deleted row, are removed only after the transaction committed
(:meth:`StateRows.release_old_slots`, :meth:`StateRows.delete_payloads`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, and_, delete, select, update
from sqlalchemy.engine import Connection, Engine

from sharedstream.statestore.models import asset, asset_state_store, task_state_store
from sharedstream.statestore.payload import PayloadBackend
from sharedstream.statestore.scopes import AssetScope, TaskScope, Writer
from sharedstream.statestore.sql import insert_if_absent, upsert

log = logging.getLogger(__name__)

TASK_ROW_KEY = ("dag_id", "run_id", "task_id", "map_index", "key")
# A payload write: the scope, the key and the slot its row now references.
SlotWrite = tuple[TaskScope, str, str]


def task_scope_filter(scope: TaskScope, all_map_indices: bool = False) -> ColumnElement[bool]:
    t = task_state_store.c
    condition = and_(t.dag_id == scope.dag_id, t.run_id == scope.run_id,
                     t.task_id == scope.task_id)
    return condition if all_map_indices else and_(condition, t.map_index == scope.map_index)


class StateRows:
    """The row half of :class:`~sharedstream.statestore.database.DatabaseBackend`."""

    engine: Engine
    clock: Callable[[], datetime]
    payload: PayloadBackend | None

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

    def write_task_rows(
        self, connection: Connection, scope: TaskScope,
        writes: Sequence[tuple[str, str, datetime | None]],
        prior: Mapping[tuple[TaskScope, str], str] | None = None,
    ) -> list[SlotWrite]:
        """Upsert rows for ``writes`` of (key, text, expires_at); with a payload backend,
        return the slots written, whose old slots the caller removes after its commit
        (:meth:`release_old_slots`).

        The rows' locks come first, by an upsert, which locks a missing row too without
        the gap lock a locking read of it takes on MariaDB (two such readers inserting
        deadlock); a new row holds slot 1 until the write below, so a new key's first
        value goes to slot 0. The read after it locks as well, so MariaDB's snapshot
        cannot show an older reference. A failure before the commit removes the objects
        written, while the locks are still held (no writer of these keys is between its
        lock and its commit). ``prior``: the committed references of rows this
        transaction deleted before (:meth:`delete_task_rows`), which the slot is chosen
        against instead of the row this write inserted."""
        now = self.clock()

        def row(key: str, text: str | None, ref: str | None,
                expires_at: datetime | None) -> dict[str, Any]:
            return {"dag_id": scope.dag_id, "run_id": scope.run_id, "task_id": scope.task_id,
                    "map_index": scope.map_index, "key": key, "value": text,
                    "payload_ref": ref, "updated_at": now, "expires_at": expires_at}

        if self.payload is None:
            self._upsert_task_rows(connection, [row(k, text, None, e) for k, text, e in writes])
            return []
        payload = self.payload
        writes = sorted(writes, key=lambda write: write[0])  # one lock order for all writers
        slots = {key: payload.slots(scope, key) for key, _, _ in writes}
        upsert(connection, task_state_store,
               [row(key, None, slots[key][1], e) for key, _, e in writes],
               conflict=TASK_ROW_KEY, update=("updated_at",))
        t = task_state_store.c
        held: dict[str, str | None] = {key: ref for key, ref in connection.execute(
            select(t.key, t.payload_ref).where(task_scope_filter(scope), t.key.in_(list(slots)))
            .with_for_update())}
        written: list[SlotWrite] = []
        rows = []
        try:
            for key, text, expires_at in writes:
                first, second = slots[key]
                current = held.get(key) if prior is None else prior.get((scope, key),
                                                                         held.get(key))
                ref = second if current == first else first
                payload.write(ref, text)
                written.append((scope, key, ref))
                rows.append(row(key, None, ref, expires_at))
            self._upsert_task_rows(connection, rows)
        except BaseException:
            self.drop_written(written)
            raise
        return written

    @staticmethod
    def _upsert_task_rows(connection: Connection, rows: list[dict[str, Any]]) -> None:
        upsert(connection, task_state_store, rows, conflict=TASK_ROW_KEY,
               update=("value", "payload_ref", "updated_at", "expires_at"))

    def drop_written(self, written: Sequence[SlotWrite]) -> None:
        """Remove the slots a write made in a transaction that fails, before its rollback
        (the rows' locks still held, so no other writer of those keys is writing them).

        Best effort: the write's own error is the one to raise; an object left over is
        an orphan no row references, overwritten by the key's next write. Window: when the
        failure is a lost connection, the server has already released the locks."""
        if self.payload is None:
            return
        try:
            for _, _, ref in written:
                self.payload.delete(ref)
        except Exception as exc:  # the write's own error is the one to raise
            log.warning("left payload objects of a failed write as orphans (%s); "
                        "state-store orphans --delete removes them", type(exc).__name__)

    def release_old_slots(self, written: Sequence[SlotWrite]) -> None:
        """After the commit of ``written``: remove each key's other slot, its old value.

        Under the row's lock again (a locking read; on SQLite a no-op UPDATE, which takes
        the one write lock), so no set of the key is between its lock and its commit,
        writing that slot; a row that moved on since, or is gone, is left to whoever
        moved it. Best effort: the value has committed, so a failure is logged, never
        raised, and leaves an orphan."""
        if self.payload is None or not written:
            return
        t = task_state_store.c
        by_scope: dict[TaskScope, dict[str, str]] = {}
        for scope, key, ref in written:
            by_scope.setdefault(scope, {})[key] = ref
        try:
            with self.engine.begin() as connection:
                for scope, refs in by_scope.items():
                    where = and_(task_scope_filter(scope), t.key.in_(sorted(refs)))
                    rows = select(t.key, t.payload_ref).where(where)
                    if connection.dialect.name == "sqlite":  # no row locks: the write lock
                        connection.execute(update(task_state_store).where(where)
                                           .values(updated_at=t.updated_at))
                    else:
                        rows = rows.with_for_update()
                    for key, held in connection.execute(rows):
                        if held == refs[key]:
                            first, second = self.payload.slots(scope, key)
                            self.payload.delete(second if held == first else first)
        except Exception as exc:  # the write committed: never turn it into an error
            log.warning("left old payload objects of a committed write as orphans (%s); "
                        "state-store orphans --delete removes them", type(exc).__name__)

    def delete_task_rows(
        self, connection: Connection, condition: ColumnElement[bool],
        prior: dict[tuple[TaskScope, str], str] | None = None,
    ) -> tuple[int, list[str]]:
        """Delete rows matching ``condition``; return the count and both slots of each
        payload row, whose objects the caller removes only after the transaction commits.

        ``prior`` (a unit of work's) gets each deleted payload row's reference: a set of
        the same key later in the transaction finds only the row it inserts, and must
        still not write the slot the committed row points at (:meth:`write_task_rows`)."""
        t = task_state_store.c
        refs: list[str] = []
        if self.payload is not None:
            for r in connection.execute(
                select(t.dag_id, t.run_id, t.task_id, t.map_index, t.key, t.payload_ref)
                .where(condition, t.payload_ref.is_not(None))
            ):
                scope = TaskScope(r.dag_id, r.run_id, r.task_id, r.map_index)
                refs += self.payload.slots(scope, r.key)
                if prior is not None:
                    prior.setdefault((scope, r.key), r.payload_ref)
        deleted = connection.execute(delete(task_state_store).where(condition)).rowcount
        return deleted, refs

    def delete_payloads(self, refs: Sequence[str]) -> None:
        """Remove the objects of deleted rows (or orphans), after their transaction
        committed; a ref a row references again by now (the key set since) is kept.

        The remaining window is a set of such a key that has written its object but not
        committed its row: the object can be removed under it, and a read of that key
        fails until it is set again."""
        if self.payload is None or not refs:
            return
        t = task_state_store.c
        with self.engine.connect() as connection:
            live = set(connection.execute(
                select(t.payload_ref).where(t.payload_ref.in_(sorted(set(refs))))
            ).scalars())
        for ref in set(refs) - live:
            self.payload.delete(ref)

    def payload_text(self, scope: TaskScope, key: str, ref: str) -> str | None:
        """The text under ``ref``, which the row of ``scope`` + ``key`` held when read;
        None when that row is gone, its inline value when it holds one now.

        A writer removes the old slot right after its commit, so a reader that read the
        row before can find the object gone: it reads the row again and follows its
        reference while it moves. The row may name the same slot again (a second write
        moved the key back to it and rewrote it meanwhile), so the object is an error only
        when it is missing twice while the row stood still (same reference, same stamp).
        """
        assert self.payload is not None
        t = task_state_store.c
        seen: tuple[object, ...] | None = None
        while True:
            try:
                return self.payload.read(ref)
            except FileNotFoundError:
                with self.engine.connect() as connection:
                    row = connection.execute(select(t.value, t.payload_ref, t.updated_at).where(
                        task_scope_filter(scope), t.key == key)).first()
                if row is None or row.payload_ref is None:
                    return None if row is None else str(row.value)
                if (row.payload_ref, row.updated_at) == seen:
                    raise
                ref, seen = row.payload_ref, (row.payload_ref, row.updated_at)

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

"""What the backend's single calls and its units of work both write with: the asset a
scope names, the rows of the two state tables, and the statements that write and delete them.

Both paths build rows here, so a key is written the same way by a single call and by a
unit of work: one upsert per table and batch, never a read-then-write.
An asset row starts at version 1 and every upsert bumps it, which is what the guarded
swaps of ``compareswap.py`` compare against.

Failure windows (task payloads, see ``sharedstream.statestore.payload``): each write's
object is new and written before its row, so a crash in between leaves an orphan object,
never a row without one, and a write that does not commit changes no object a row
references; a superseded or deleted row's object is removed only after the transaction
committed (:meth:`StateRows.delete_payloads`), so a rollback never loses an object.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, and_, delete, select
from sqlalchemy.engine import Connection, Engine

from sharedstream.statestore.models import asset, asset_state_store, task_state_store
from sharedstream.statestore.payload import PayloadBackend
from sharedstream.statestore.scopes import AssetScope, TaskScope, Writer
from sharedstream.statestore.sql import insert_if_absent, upsert

log = logging.getLogger(__name__)


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

    def _task_rows(
        self, scope: TaskScope, writes: Sequence[tuple[str, str, datetime | None]]
    ) -> tuple[list[dict[str, Any]], list[str]]:
        """Rows for ``writes`` of (key, text, expires_at), and the payload objects written
        for them, each under a fresh reference before the rows commit.

        The caller removes the objects the rows supersede after its commit
        (:meth:`superseded_refs`, then :meth:`delete_payloads`) and the written ones if
        it does not commit (:meth:`discard_payloads`)."""
        now = self.clock()
        rows = []
        written: list[str] = []
        for key, text, expires_at in writes:
            ref = None
            if self.payload is not None:
                ref = self.payload.fresh_reference(scope, key)
                try:
                    self.payload.write(ref, text)
                except BaseException:
                    for made in written:  # no row references them yet
                        self.payload.delete(made)
                    raise
                written.append(ref)
            rows.append({
                "dag_id": scope.dag_id, "run_id": scope.run_id, "task_id": scope.task_id,
                "map_index": scope.map_index, "key": key,
                "value": None if ref else text, "payload_ref": ref,
                "updated_at": now, "expires_at": expires_at,
            })
        return rows, written

    def superseded_refs(
        self, connection: Connection, scope: TaskScope, keys: Sequence[str]
    ) -> list[str]:
        """The payload refs the rows of ``keys`` hold before this transaction overwrites
        them (read in it, before the upsert), whose objects go after the commit."""
        if self.payload is None or not keys:
            return []
        t = task_state_store.c
        return [r for r in connection.execute(
            select(t.payload_ref).where(task_scope_filter(scope), t.key.in_(keys),
                                        t.payload_ref.is_not(None))
        ).scalars() if r is not None]

    @staticmethod
    def _upsert_task_rows(connection: Connection, rows: list[dict[str, Any]]) -> None:
        upsert(connection, task_state_store, rows,
               conflict=("dag_id", "run_id", "task_id", "map_index", "key"),
               update=("value", "payload_ref", "updated_at", "expires_at"))

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
        """Remove the objects of deleted or superseded rows, after their transaction
        committed, or of a write that did not commit (:meth:`discard_payloads`).

        A ref that a row references is kept: a write's reference is never used again, so
        that is a commit reported as failed that did land, or a row of an older version
        (plain per-key references) set again since. The remaining window is such an older
        version's ``set`` of the same key that has rewritten its object but not yet
        committed its row: the object can be removed under it.
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

    def discard_payloads(self, refs: Sequence[str]) -> None:
        """Remove the objects a write made for a transaction that did not commit.

        Best effort: when that fails too (the database unreachable for the check), the
        objects stay as orphans no row references, which ``state-store orphans`` lists;
        the write's own error is what the caller raises. Window: a commit reported as
        failed whose transaction still lands after the check loses its new objects (a
        read of those keys fails until they are set again)."""
        try:
            self.delete_payloads(refs)
        except Exception as exc:  # the write's own error is the one to raise
            log.warning("left %d payload objects of a failed write as orphans (%s); "
                        "state-store orphans --delete removes them", len(refs),
                        type(exc).__name__)

    def payload_text(self, scope: TaskScope, key: str, ref: str) -> str | None:
        """The text under ``ref``, which the row of ``scope`` + ``key`` held when read;
        None when that row is gone, its inline value when it holds one now.

        A writer removes a superseded object right after its commit, so a reader that read
        the row before can find the object gone: it reads the row again and follows its
        reference while it moves. A missing object the row still references is an error.
        """
        assert self.payload is not None
        t = task_state_store.c
        while True:
            try:
                return self.payload.read(ref)
            except FileNotFoundError:
                with self.engine.connect() as connection:
                    row = connection.execute(select(t.value, t.payload_ref).where(
                        task_scope_filter(scope), t.key == key)).first()
                if row is None or row.payload_ref is None:
                    return None if row is None else str(row.value)
                if row.payload_ref == ref:
                    raise
                ref = row.payload_ref

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

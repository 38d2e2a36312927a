"""The default backend: both stores in the SQL database, optionally payloads in files.

Here are the backend's single calls, each its own transaction. The rest is split by job,
imported one way: ``unitwrite.py`` writes a unit of work inside the caller's
transaction, ``compareswap.py`` moves asset keys only forwards (one key, or a unit's
keys at once), and ``staterows.py`` holds what both write paths share (resolving an
asset, the state tables' rows and the statements writing and deleting them).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, and_, delete, or_, select
from sqlalchemy.engine import Engine

from sharedstream.statestore.backend import StateBackend, StateEntry
from sharedstream.statestore.compareswap import MAX_CAS_ATTEMPTS
from sharedstream.statestore.models import asset_state_store, task_state_store
from sharedstream.statestore.payload import PayloadBackend
from sharedstream.statestore.scopes import AssetScope, TaskScope, Writer
from sharedstream.statestore.settings import StateStoreSettings
from sharedstream.statestore.staging import MISSING
from sharedstream.statestore.staterows import task_scope_filter
from sharedstream.statestore.unitwrite import UnitWriter
from sharedstream.statestore.values import decode_value


class DatabaseBackend(UnitWriter, StateBackend):
    """State rows in the configured database; writes are single-statement upserts.

    With a payload backend, task values live in objects and rows hold their reference
    (see ``sharedstream.statestore.payload`` for the write order and its failure windows).
    Asset state always stays in the database: it must commit atomically with events and
    ``advance`` is a compare-and-swap, neither of which an external object store can join.

    Bigger than 25 methods: it implements :class:`StateBackend` (13 operations that the
    in-memory backend implements too) and the unit-of-work writes of ``UnitWriter``
    over the same rows; the row-level statements live in ``staterows.py``.
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
        # UnitWriter._asset_ids and CompareSwap._swap_remembered). Plain dict/set
        # operations: several writer threads may share a backend, and a stale entry only
        # costs a slower path.
        self._live_asset_ids = set()
        self._watermarks = {}

    # -- task store -------------------------------------------------------------------------

    def _not_expired(self) -> ColumnElement[bool]:
        t = task_state_store.c
        return or_(t.expires_at.is_(None), t.expires_at > self.clock())

    def _task_text(self, scope: TaskScope, key: str, value: str | None,
                   ref: str | None) -> str | None:
        """A task row's text; None when its key was deleted since the row was read."""
        if ref is not None:
            if self.payload is None:
                raise RuntimeError(
                    f"row references payload {ref!r} but no [workers] state_backend is set"
                )
            return self.payload_text(scope, key, ref)
        assert value is not None, "the value_or_ref check constraint guarantees one"
        return value

    def task_get(self, scope: TaskScope, key: str) -> Any:
        t = task_state_store.c
        with self.engine.connect() as connection:
            row = connection.execute(
                select(t.value, t.payload_ref).where(
                    task_scope_filter(scope), t.key == key, self._not_expired()
                )
            ).first()
        text = None if row is None else self._task_text(scope, key, row.value, row.payload_ref)
        return MISSING if text is None else decode_value(text)

    def task_set(
        self, scope: TaskScope, key: str, value: Any, text: str, expires_at: datetime | None
    ) -> None:
        with self.engine.begin() as connection:
            written = self.write_task_rows(connection, scope, [(key, text, expires_at)])
        self.release_old_slots(written)

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
            text = self._task_text(scope, row.key, row.value, row.payload_ref)
            if text is None:
                continue
            entries.append(StateEntry(
                key=row.key, value=decode_value(text), size=len(text.encode("utf-8")),
                updated_at=row.updated_at,
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

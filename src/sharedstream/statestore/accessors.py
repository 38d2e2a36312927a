"""Accessors: the ``get/set/delete/clear`` (+ ``advance``) API of one scope.

An accessor is unbound (each write commits at once, in its own transaction) or bound to
a ``UnitOfWork`` (writes are staged there; reads see staged writes first). Async twins run
the same call on the store's own thread pool, so a slow database never blocks the event
loop and never queues behind another component's thread.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

from sharedstream.statestore.backend import StateEntry
from sharedstream.statestore.comparison import compare, is_forward
from sharedstream.statestore.handle import StoreHandle
from sharedstream.statestore.retention import resolve_expiry
from sharedstream.statestore.scopes import AssetScope, TaskScope, Writer
from sharedstream.statestore.staging import (
    MISSING,
    NOT_STAGED,
    AssetStaging,
    StagedDelete,
    StagedSet,
)
from sharedstream.statestore.uow import UnitOfWork
from sharedstream.statestore.values import check_key, encode_value

_NO_LOCK = nullcontext()  # reusable: it holds nothing (one per write was an allocation)


class TaskState:
    """Task state of one ``TaskScope`` (its map index is its own namespace)."""

    def __init__(self, store: StoreHandle, scope: TaskScope, uow: UnitOfWork | None = None):
        self._store = store
        self.scope = scope
        self.uow = uow

    def bound(self, uow: UnitOfWork) -> TaskState:
        return TaskState(self._store, self.scope, uow)

    def _lookup(self, key: str) -> Any:
        if self.uow is not None:
            with self.uow.lock:
                staged = self.uow.staged.task(self.scope).lookup(key)
            if staged is not NOT_STAGED:
                return staged
        return self._store.backend.task_get(self.scope, key)

    def get(self, key: str, default: Any = None) -> Any:
        """The value of ``key``, or ``default`` when absent or expired."""
        found = self._lookup(check_key(key))
        return default if found is MISSING else found

    def set(self, key: str, value: Any, retention: object = None) -> None:
        """Store ``value``; ``retention``: timedelta, ``NEVER_EXPIRE`` or None (default)."""
        check_key(key)
        text = encode_value(key, value, self._store.settings.max_value_storage_bytes)
        expires_at = resolve_expiry(
            retention, self._store.settings.default_retention_days, self._store.clock()
        )
        if self.uow is None:
            self._store.backend.task_set(self.scope, key, value, text, expires_at)
            return
        with self.uow.lock:
            self.uow.staged.task(self.scope).ops[key] = StagedSet(
                value, text, expires_at=expires_at
            )

    def delete(self, key: str) -> bool:
        """Remove ``key``; True if it existed (and was not expired)."""
        check_key(key)
        if self.uow is None:
            return self._store.backend.task_delete(self.scope, key)
        with self.uow.lock:
            existed = self._lookup(key) is not MISSING
            self.uow.staged.task(self.scope).ops[key] = StagedDelete()
        return existed

    def clear(self, all_map_indices: bool = False) -> None:
        """Remove every key of this scope, or of every map index of the task."""
        if self.uow is None:
            self._store.backend.task_clear(self.scope, all_map_indices)
            return
        with self.uow.lock:
            if all_map_indices:
                self.uow.staged.clear_task_group(self.scope)
            else:
                staging = self.uow.staged.task(self.scope)
                staging.cleared = True
                staging.ops.clear()

    def items(self) -> list[StateEntry]:
        """Committed keys of this scope (staged writes are not listed)."""
        return self._store.backend.task_items(self.scope)

    async def aget(self, key: str, default: Any = None) -> Any:
        return await self._store.run_async(self.get, key, default)

    async def aset(self, key: str, value: Any, retention: object = None) -> None:
        await self._store.run_async(self.set, key, value, retention)

    async def adelete(self, key: str) -> bool:
        return await self._store.run_async(self.delete, key)

    async def aclear(self, all_map_indices: bool = False) -> None:
        await self._store.run_async(self.clear, all_map_indices)


class AssetState:
    """Asset state of one asset; every write records ``writer`` (kind + identity).

    This class is the one asset-state API (``get/set/advance/delete/clear/items`` and
    their async twins). Where reads are answered from and where writes are staged are
    the hooks below: unbound, writes go straight to the database; bound to a
    ``UnitOfWork``, they are staged there. The triggerer's per-watcher accessor
    (``triggerer.state_access.WatcherStateAccess``) overrides the hooks to stage into
    the message window being handled, never the methods.

    The async twins answer staged values on the caller's loop and send only database
    calls to the store's threads.

    Bigger than 25 methods: the public API is every operation twice (sync and async)
    plus the hooks; a user reads it as one mapping-like object.
    """

    def __init__(
        self,
        store: StoreHandle,
        scope: AssetScope,
        writer: Writer,
        uow: UnitOfWork | None = None,
    ):
        self._store = store
        self.scope = scope
        self.writer = writer
        self.uow = uow

    def bound(self, uow: UnitOfWork) -> AssetState:
        return AssetState(self._store, self.scope, self.writer, uow)

    # -- hooks -----------------------------------------------------------------------------

    def _writes_through(self) -> bool:
        """True when a write goes to the database at once (nothing to stage it in)."""
        return self.uow is None

    def _staging(self) -> AssetStaging | None:
        """Where staged writes go; None drops them (their unit of work is resolved)."""
        assert self.uow is not None
        return self.uow.staged.asset(self.scope)

    def _guard(self) -> AbstractContextManager[object]:
        """Held around a read-then-stage, so threads sharing a unit of work stay atomic."""
        return self.uow.lock if self.uow is not None else _NO_LOCK

    def _staged(self, key: str) -> Any:
        """The staged value of ``key`` (MISSING if deleted), else NOT_STAGED."""
        if self.uow is None:
            return NOT_STAGED
        with self.uow.lock:
            return self.uow.staged.asset(self.scope).lookup(key)

    def _read(self, key: str) -> Any:
        """The committed value of ``key`` (MISSING if absent)."""
        return self._store.backend.asset_get(self.scope, key)

    async def _aread(self, key: str) -> Any:
        return await self._store.run_async(self._store.backend.asset_get, self.scope, key)

    def _wrote_through(self, key: str | None) -> None:
        """A direct write changed ``key`` (None: every key); nothing to do here."""

    # -- shared steps ----------------------------------------------------------------------

    def _lookup(self, key: str) -> Any:
        found = self._staged(key)
        return self._read(key) if found is NOT_STAGED else found

    async def _alookup(self, key: str) -> Any:
        found = self._staged(key)
        return await self._aread(key) if found is NOT_STAGED else found

    def _encode(self, key: str, value: Any) -> str:
        return encode_value(check_key(key), value, self._store.settings.max_value_storage_bytes)

    def _stage_set(self, key: str, value: Any, text: str) -> None:
        with self._guard():
            staging = self._staging()
            if staging is not None:
                staging.ops[key] = StagedSet(value, text, self.writer)

    def _stage_advance(self, key: str, value: Any, text: str, current: Any) -> bool:
        if current is not MISSING and not is_forward(value, current):
            return False
        staging = self._staging()
        if staging is not None:
            staging.stage_advance(key, value, text, self.writer)
        return True

    def _stage_delete(self, key: str) -> None:
        staging = self._staging()
        if staging is not None:
            staging.ops[key] = StagedDelete()

    def _stage_clear(self) -> None:
        with self._guard():
            staging = self._staging()
            if staging is not None:
                staging.cleared = True
                staging.ops.clear()

    # -- the API ---------------------------------------------------------------------------

    def get(self, key: str, default: Any = None) -> Any:
        found = self._lookup(check_key(key))
        return default if found is MISSING else found

    def set(self, key: str, value: Any) -> None:
        """Store ``value`` unconditionally (use ``advance`` for cursors)."""
        text = self._encode(key, value)
        if self._writes_through():
            self._wrote_through(key)
            self._store.backend.asset_set(self.scope, key, value, text, self.writer)
            return
        self._stage_set(key, value, text)

    def advance(self, key: str, value: Any) -> bool:
        """Set ``key`` to ``value`` only if that moves it forwards; True if it moved.

        Raises TypeError when ``value`` is not orderable (number, string, list) or is of
        another kind than the stored value.
        """
        text = self._encode(key, value)
        compare(value, value)  # refuse unorderable kinds before anything is written
        if self._writes_through():
            self._wrote_through(key)
            return self._store.backend.asset_advance(self.scope, key, value, text, self.writer)
        with self._guard():
            return self._stage_advance(key, value, text, self._lookup(key))

    def delete(self, key: str) -> bool:
        """Remove ``key``; True if it existed."""
        check_key(key)
        if self._writes_through():
            self._wrote_through(key)
            return self._store.backend.asset_delete(self.scope, key)
        with self._guard():
            existed = self._lookup(key) is not MISSING
            self._stage_delete(key)
        return existed

    def clear(self) -> None:
        """Remove every key of the asset."""
        if self._writes_through():
            self._wrote_through(None)
            self._store.backend.asset_clear(self.scope)
            return
        self._stage_clear()

    def items(self) -> list[StateEntry]:
        """Committed keys of the asset (staged writes are not listed)."""
        return self._store.backend.asset_items(self.scope)

    async def aget(self, key: str, default: Any = None) -> Any:
        found = await self._alookup(check_key(key))
        return default if found is MISSING else found

    async def aset(self, key: str, value: Any) -> None:
        text = self._encode(key, value)
        if self._writes_through():
            self._wrote_through(key)
            await self._store.run_async(self._store.backend.asset_set, self.scope, key, value,
                                        text, self.writer)
            return
        self._stage_set(key, value, text)

    async def aadvance(self, key: str, value: Any) -> bool:
        text = self._encode(key, value)
        compare(value, value)
        if self._writes_through():
            self._wrote_through(key)
            return await self._store.run_async(self._store.backend.asset_advance, self.scope,
                                               key, value, text, self.writer)
        current = await self._alookup(key)
        with self._guard():
            return self._stage_advance(key, value, text, current)

    async def adelete(self, key: str) -> bool:
        check_key(key)
        if self._writes_through():
            self._wrote_through(key)
            return await self._store.run_async(self._store.backend.asset_delete, self.scope,
                                               key)
        existed = await self._alookup(key) is not MISSING
        with self._guard():
            self._stage_delete(key)
        return existed

    async def aclear(self) -> None:
        if self._writes_through():
            self._wrote_through(None)
            await self._store.run_async(self._store.backend.asset_clear, self.scope)
            return
        self._stage_clear()

"""Accessors: the ``get/set/delete/clear`` (+ ``advance``) API of one scope.

An accessor is unbound (each write commits at once, in its own transaction) or bound to
a ``UnitOfWork`` (writes are staged there; reads see staged writes first). Async twins run
the same call on the store's own thread pool, so a slow database never blocks the event
loop and never queues behind another component's thread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sharedstream.statestore.backend import StateEntry
from sharedstream.statestore.comparison import compare, is_forward
from sharedstream.statestore.retention import resolve_expiry
from sharedstream.statestore.scopes import AssetScope, TaskScope, Writer
from sharedstream.statestore.staging import MISSING, NOT_STAGED, StagedDelete, StagedSet
from sharedstream.statestore.uow import UnitOfWork
from sharedstream.statestore.values import check_key, encode_value

if TYPE_CHECKING:
    from sharedstream.statestore.store import StateStore


class TaskState:
    """Task state of one ``TaskScope`` (its map index is its own namespace)."""

    def __init__(self, store: StateStore, scope: TaskScope, uow: UnitOfWork | None = None):
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
    """Asset state of one asset; every write records ``writer`` (kind + identity)."""

    def __init__(
        self,
        store: StateStore,
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

    def _lookup(self, key: str) -> Any:
        if self.uow is not None:
            with self.uow.lock:
                staged = self.uow.staged.asset(self.scope).lookup(key)
            if staged is not NOT_STAGED:
                return staged
        return self._store.backend.asset_get(self.scope, key)

    def _encode(self, key: str, value: Any) -> str:
        check_key(key)
        return encode_value(key, value, self._store.settings.max_value_storage_bytes)

    def get(self, key: str, default: Any = None) -> Any:
        found = self._lookup(check_key(key))
        return default if found is MISSING else found

    def set(self, key: str, value: Any) -> None:
        """Store ``value`` unconditionally (use ``advance`` for cursors)."""
        text = self._encode(key, value)
        if self.uow is None:
            self._store.backend.asset_set(self.scope, key, value, text, self.writer)
            return
        with self.uow.lock:
            self.uow.staged.asset(self.scope).ops[key] = StagedSet(value, text, self.writer)

    def advance(self, key: str, value: Any) -> bool:
        """Set ``key`` to ``value`` only if that moves it forwards; True if it moved.

        Raises TypeError when ``value`` is not orderable (number, string, list) or is of
        another kind than the stored value.
        """
        text = self._encode(key, value)
        compare(value, value)  # refuse unorderable kinds before anything is written
        if self.uow is None:
            return self._store.backend.asset_advance(self.scope, key, value, text, self.writer)
        with self.uow.lock:
            current = self._lookup(key)
            if current is not MISSING and not is_forward(value, current):
                return False
            self.uow.staged.asset(self.scope).stage_advance(key, value, text, self.writer)
        return True

    def delete(self, key: str) -> bool:
        check_key(key)
        if self.uow is None:
            return self._store.backend.asset_delete(self.scope, key)
        with self.uow.lock:
            existed = self._lookup(key) is not MISSING
            self.uow.staged.asset(self.scope).ops[key] = StagedDelete()
        return existed

    def clear(self) -> None:
        if self.uow is None:
            self._store.backend.asset_clear(self.scope)
            return
        with self.uow.lock:
            staging = self.uow.staged.asset(self.scope)
            staging.cleared = True
            staging.ops.clear()

    def items(self) -> list[StateEntry]:
        return self._store.backend.asset_items(self.scope)

    async def aget(self, key: str, default: Any = None) -> Any:
        return await self._store.run_async(self.get, key, default)

    async def aset(self, key: str, value: Any) -> None:
        await self._store.run_async(self.set, key, value)

    async def aadvance(self, key: str, value: Any) -> bool:
        return await self._store.run_async(self.advance, key, value)

    async def adelete(self, key: str) -> bool:
        return await self._store.run_async(self.delete, key)

    async def aclear(self) -> None:
        await self._store.run_async(self.clear)

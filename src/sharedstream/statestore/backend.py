"""The storage interface behind the accessors (``[state_store] backend`` replaces it)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.engine import Connection, Engine

from sharedstream.statestore.scopes import AssetScope, TaskScope, Writer
from sharedstream.statestore.settings import StateStoreSettings
from sharedstream.statestore.staging import (
    StagedAdvance,
    StagedDelete,
    StagedSet,
    StagedWrites,
)


@dataclass(frozen=True)
class StateEntry:
    """One stored key as listed by ``items`` (value already decoded)."""

    key: str
    value: Any
    size: int
    updated_at: datetime
    expires_at: datetime | None = None
    writer_kind: str | None = None
    writer_id: str | None = None
    payload_ref: str | None = None


class StateBackend(ABC):
    """Storage of both state stores.

    Accessors validate keys, values and retention before calling in, so a backend receives
    only checked input: ``value`` is the Python value and ``text`` its JSON encoding.
    Reads return ``MISSING`` (from ``sharedstream.statestore.staging``) for an absent key.
    Subclasses are constructed as ``cls(engine=..., settings=..., clock=...)``.
    """

    def __init__(
        self, *, engine: Engine, settings: StateStoreSettings, clock: Callable[[], datetime]
    ) -> None:
        self.engine = engine
        self.settings = settings
        self.clock = clock

    @abstractmethod
    def task_get(self, scope: TaskScope, key: str) -> Any: ...

    @abstractmethod
    def task_set(
        self, scope: TaskScope, key: str, value: Any, text: str, expires_at: datetime | None
    ) -> None: ...

    @abstractmethod
    def task_delete(self, scope: TaskScope, key: str) -> bool: ...

    @abstractmethod
    def task_clear(self, scope: TaskScope, all_map_indices: bool) -> int: ...

    @abstractmethod
    def task_items(self, scope: TaskScope) -> list[StateEntry]: ...

    @abstractmethod
    def asset_get(self, scope: AssetScope, key: str) -> Any: ...

    @abstractmethod
    def asset_set(
        self, scope: AssetScope, key: str, value: Any, text: str, writer: Writer
    ) -> None: ...

    @abstractmethod
    def asset_delete(self, scope: AssetScope, key: str) -> bool: ...

    @abstractmethod
    def asset_clear(self, scope: AssetScope) -> int: ...

    @abstractmethod
    def asset_items(self, scope: AssetScope) -> list[StateEntry]: ...

    @abstractmethod
    def asset_advance(
        self, scope: AssetScope, key: str, value: Any, text: str, writer: Writer
    ) -> bool:
        """Move ``key`` to ``value`` only if it is forwards (compare-and-swap)."""

    def apply_staged(
        self, connection: Connection, staged: StagedWrites
    ) -> list[Callable[[], None]]:
        """Write a unit of work's staged state.

        This default replays the writes through the backend's own methods, outside
        ``connection``: a backend that does not live in the caller's database cannot join
        its transaction, so state and the caller's rows may then diverge if one side fails.
        The database backend overrides this to write inside ``connection``. Returns
        actions to run once the caller's transaction has committed.
        """
        del connection
        for group in staged.cleared_task_groups:
            self.task_clear(TaskScope(*group), all_map_indices=True)
        for task_scope, task in staged.tasks.items():
            if task.cleared:
                self.task_clear(task_scope, all_map_indices=False)
            for key, op in task.ops.items():
                if isinstance(op, StagedSet):
                    self.task_set(task_scope, key, op.value, op.text, op.expires_at)
                else:
                    self.task_delete(task_scope, key)
        for asset_scope, asset in staged.assets.items():
            if asset.cleared:
                self.asset_clear(asset_scope)
            for key, aop in asset.ops.items():
                if isinstance(aop, StagedDelete):
                    self.asset_delete(asset_scope, key)
                elif isinstance(aop, StagedAdvance):
                    self.asset_advance(asset_scope, key, aop.value, aop.text, aop.writer)
                else:
                    assert aop.writer is not None, "asset sets are always staged with a writer"
                    self.asset_set(asset_scope, key, aop.value, aop.text, aop.writer)
        return []

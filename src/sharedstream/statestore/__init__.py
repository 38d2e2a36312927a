"""Task and asset state stores. Nothing here imports Kafka.

``from sharedstream.statestore import StateStore, TaskScope, AssetScope, NEVER_EXPIRE``

The public names load on first use (PEP 562), as the package's own do: a command that
needs one small module of this package (``durations``, ``types``) does not pay for the
stores, their backends and SQLAlchemy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Public name -> the module that defines it.
_PUBLIC = {
    "AssetState": "accessors",
    "TaskState": "accessors",
    "StateBackend": "backend",
    "StateEntry": "backend",
    "DatabaseBackend": "database",
    "CleanupReport": "maintenance",
    "OrphanReport": "maintenance",
    "SweepReport": "maintenance",
    "FilesystemPayloadBackend": "payload",
    "PayloadBackend": "payload",
    "NEVER_EXPIRE": "retention",
    "AssetScope": "scopes",
    "TaskScope": "scopes",
    "Writer": "scopes",
    "StateStoreSettings": "settings",
    "StateStore": "store",
    "UnitOfWork": "uow",
    "ValueTooLargeError": "values",
}

__all__ = [
    "NEVER_EXPIRE",
    "AssetScope",
    "AssetState",
    "CleanupReport",
    "DatabaseBackend",
    "FilesystemPayloadBackend",
    "OrphanReport",
    "PayloadBackend",
    "StateBackend",
    "StateEntry",
    "StateStore",
    "StateStoreSettings",
    "SweepReport",
    "TaskScope",
    "TaskState",
    "UnitOfWork",
    "ValueTooLargeError",
    "Writer",
]

if TYPE_CHECKING:
    from sharedstream.statestore.accessors import AssetState as AssetState
    from sharedstream.statestore.accessors import TaskState as TaskState
    from sharedstream.statestore.backend import StateBackend as StateBackend
    from sharedstream.statestore.backend import StateEntry as StateEntry
    from sharedstream.statestore.database import DatabaseBackend as DatabaseBackend
    from sharedstream.statestore.maintenance import CleanupReport as CleanupReport
    from sharedstream.statestore.maintenance import OrphanReport as OrphanReport
    from sharedstream.statestore.maintenance import SweepReport as SweepReport
    from sharedstream.statestore.payload import (
        FilesystemPayloadBackend as FilesystemPayloadBackend,
    )
    from sharedstream.statestore.payload import PayloadBackend as PayloadBackend
    from sharedstream.statestore.retention import NEVER_EXPIRE as NEVER_EXPIRE
    from sharedstream.statestore.scopes import AssetScope as AssetScope
    from sharedstream.statestore.scopes import TaskScope as TaskScope
    from sharedstream.statestore.scopes import Writer as Writer
    from sharedstream.statestore.settings import StateStoreSettings as StateStoreSettings
    from sharedstream.statestore.store import StateStore as StateStore
    from sharedstream.statestore.uow import UnitOfWork as UnitOfWork
    from sharedstream.statestore.values import ValueTooLargeError as ValueTooLargeError


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'sharedstream.statestore' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"sharedstream.statestore.{module}"), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(__all__)

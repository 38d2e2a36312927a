"""Task and asset state stores. Nothing here imports Kafka.

``from sharedstream.statestore import StateStore, TaskScope, AssetScope, NEVER_EXPIRE``
"""

from sharedstream.statestore.accessors import AssetState, TaskState
from sharedstream.statestore.backend import StateBackend, StateEntry
from sharedstream.statestore.database import DatabaseBackend
from sharedstream.statestore.maintenance import CleanupReport, OrphanReport, SweepReport
from sharedstream.statestore.payload import FilesystemPayloadBackend, PayloadBackend
from sharedstream.statestore.retention import NEVER_EXPIRE
from sharedstream.statestore.scopes import AssetScope, TaskScope, Writer
from sharedstream.statestore.settings import StateStoreSettings
from sharedstream.statestore.store import StateStore
from sharedstream.statestore.uow import UnitOfWork
from sharedstream.statestore.values import ValueTooLargeError

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

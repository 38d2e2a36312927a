"""sharedstream: a standalone event triggerer for Kafka with one shared consumer per topic set.

The public names load on first use (PEP 562), so ``import sharedstream`` is cheap: the
``sharedstream`` command installs its signal handling before the heavy imports, and a
SIGTERM during start-up is a clean exit.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# Public name -> the module that defines it.
_PUBLIC = {
    "NEVER_EXPIRE": "sharedstream.statestore.retention",
    "Asset": "sharedstream.triggers",
    "AssetWatcher": "sharedstream.triggers",
    "BaseEventTrigger": "sharedstream.triggers",
    "KafkaMessage": "sharedstream.triggers",
    "KafkaSharedStreamTrigger": "sharedstream.triggers",
    "KafkaMessageTrigger": "sharedstream.triggers",
    "MessageBatch": "sharedstream.triggers",
    "TriggerEvent": "sharedstream.triggers",
    "reject_shared_stream_event": "sharedstream.triggers",
}

__all__ = [
    "NEVER_EXPIRE",
    "Asset",
    "AssetWatcher",
    "BaseEventTrigger",
    "KafkaMessage",
    "KafkaMessageTrigger",
    "KafkaSharedStreamTrigger",
    "MessageBatch",
    "TriggerEvent",
    "__version__",
    "reject_shared_stream_event",
]

if TYPE_CHECKING:
    from sharedstream.statestore.retention import NEVER_EXPIRE as NEVER_EXPIRE
    from sharedstream.triggers import Asset as Asset
    from sharedstream.triggers import AssetWatcher as AssetWatcher
    from sharedstream.triggers import BaseEventTrigger as BaseEventTrigger
    from sharedstream.triggers import KafkaMessage as KafkaMessage
    from sharedstream.triggers import KafkaMessageTrigger as KafkaMessageTrigger
    from sharedstream.triggers import KafkaSharedStreamTrigger as KafkaSharedStreamTrigger
    from sharedstream.triggers import MessageBatch as MessageBatch
    from sharedstream.triggers import TriggerEvent as TriggerEvent
    from sharedstream.triggers import reject_shared_stream_event as reject_shared_stream_event


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'sharedstream' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)

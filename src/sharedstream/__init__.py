"""sharedstream: a standalone event triggerer for Kafka with one shared consumer per topic set."""

from sharedstream.statestore.retention import NEVER_EXPIRE
from sharedstream.triggers import (
    Asset,
    AssetWatcher,
    BaseEventTrigger,
    KafkaMessage,
    KafkaSharedStreamTrigger,
    TriggerEvent,
    reject_shared_stream_event,
)

__version__ = "0.1.0"

__all__ = [
    "NEVER_EXPIRE",
    "Asset",
    "AssetWatcher",
    "BaseEventTrigger",
    "KafkaMessage",
    "KafkaSharedStreamTrigger",
    "TriggerEvent",
    "__version__",
    "reject_shared_stream_event",
]

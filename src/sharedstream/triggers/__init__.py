"""Trigger side: assets, watchers, trigger events and shared-stream triggers."""

from sharedstream.core.batch import MessageBatch
from sharedstream.core.message import KafkaMessage
from sharedstream.triggers.assets import Asset, AssetWatcher
from sharedstream.triggers.base import BaseEventTrigger, TriggerEvent, reject_shared_stream_event
from sharedstream.triggers.kafka import KafkaMessageTrigger, KafkaSharedStreamTrigger

__all__ = [
    "Asset",
    "AssetWatcher",
    "BaseEventTrigger",
    "KafkaMessage",
    "KafkaMessageTrigger",
    "KafkaSharedStreamTrigger",
    "MessageBatch",
    "TriggerEvent",
    "reject_shared_stream_event",
]

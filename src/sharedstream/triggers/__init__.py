"""Trigger side: assets, watchers, trigger events and shared-stream triggers."""

from sharedstream.triggers.assets import Asset, AssetWatcher
from sharedstream.triggers.base import BaseEventTrigger, TriggerEvent, reject_shared_stream_event
from sharedstream.triggers.kafka import KafkaSharedStreamTrigger
from sharedstream.triggers.message import KafkaMessage

__all__ = [
    "Asset",
    "AssetWatcher",
    "BaseEventTrigger",
    "KafkaMessage",
    "KafkaSharedStreamTrigger",
    "TriggerEvent",
    "reject_shared_stream_event",
]

"""Trigger side: assets, watchers, trigger events and shared-stream triggers."""

from sharedstream.triggers.message import KafkaMessage

__all__ = ["KafkaMessage"]

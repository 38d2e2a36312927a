"""Kafka topic ids (UUIDs): the first part of every event identity.

A topic that is deleted and recreated keeps its name but gets a new id, so
events of the new topic never collide with those of the old one (guarantee 2).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from confluent_kafka import TopicCollection
from confluent_kafka.admin import AdminClient

from sharedstream.kafka.connections import client_config

TopicIdResolver = Callable[[Mapping[str, Any], Sequence[str]], dict[str, str]]


def describe_topic_ids(
    config: Mapping[str, Any], topics: Sequence[str], timeout: float = 10.0
) -> dict[str, str]:
    """``{topic: topic id}`` from the broker; raises if any topic is missing."""
    admin = AdminClient(client_config(config))
    futures = admin.describe_topics(TopicCollection(list(topics)), request_timeout=timeout)
    return {name: str(future.result(timeout).topic_id) for name, future in futures.items()}

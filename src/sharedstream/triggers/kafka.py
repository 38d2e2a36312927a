"""``KafkaSharedStreamTrigger``: watch Kafka topics through one shared consumer per topic set.

Every trigger with the same topics and connection joins one shared-stream group
(one consumer, one consumer group ``<group.id>.<topics joined by +>``). The group's
producer is built from :meth:`KafkaSharedStreamTrigger.shared_stream_arguments`;
every member must agree on them (``check_shared_stream_group``), or the triggerer
refuses to start: a silent "first subscriber wins" would send one watcher's dead
letters to another watcher's topic. Subclasses may add filter-only kwargs freely.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Hashable, Mapping, Sequence
from typing import Any

from sharedstream.core.message import KafkaMessage
from sharedstream.kafka.connections import resolve_connection
from sharedstream.kafka.producer import KafkaSharedStreamProducer
from sharedstream.kafka.runtime import kafka_runtime
from sharedstream.kafka.topic_ids import describe_topic_ids
from sharedstream.triggers.base import (
    BaseEventTrigger,
    TriggerEvent,
    classpath,
    reject_shared_stream_event,
)

log = logging.getLogger(__name__)

STREAM_KIND = "kafka-shared-stream"


class KafkaSharedStreamTrigger(BaseEventTrigger):
    """Turns each message of ``topics`` into a UTF-8 text event (override the filter to do more).

    Tombstones (value None) are acknowledged without an event and counted in
    :attr:`tombstones_skipped`; values that are not UTF-8 are rejected with the
    reason ``"not UTF-8"`` (dead-letter topic, or ``rejected_message``).
    """

    def __init__(
        self,
        *,
        topics: Sequence[str],
        kafka_config_id: str = "kafka_default",
        poll_timeout: float = 1.0,
        dlq_topic: str | None = None,
    ) -> None:
        if isinstance(topics, str):
            raise TypeError("topics must be a list of topic names, not a string")
        self.topics = sorted(set(topics))
        if not self.topics:
            raise ValueError("KafkaSharedStreamTrigger needs at least one topic")
        self.kafka_config_id = kafka_config_id
        self.poll_timeout = poll_timeout
        self.dlq_topic = dlq_topic
        self.tombstones_skipped = 0

    def shared_stream_key(self) -> Hashable:
        return (STREAM_KIND, tuple(self.topics), self.kafka_config_id)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            classpath(self),
            {
                "topics": list(self.topics),
                "kafka_config_id": self.kafka_config_id,
                "poll_timeout": self.poll_timeout,
                "dlq_topic": self.dlq_topic,
            },
        )

    def shared_stream_arguments(self) -> Mapping[str, Any]:
        """What the group's consumer is built from; a subclass's own kwargs are not in it."""
        return {
            "topics": list(self.topics),
            "kafka_config_id": self.kafka_config_id,
            "poll_timeout": self.poll_timeout,
            "dlq_topic": self.dlq_topic,
        }

    @classmethod
    def create_shared_stream_producer(cls, kwargs: Mapping[str, Any]) -> KafkaSharedStreamProducer:
        """The group's producer; connection and recorder come from the process runtime."""
        runtime = kafka_runtime()
        config_id = str(kwargs.get("kafka_config_id", "kafka_default"))
        config = resolve_connection(config_id, runtime.connections, runtime.environ)
        return KafkaSharedStreamProducer(
            topics=list(kwargs["topics"]),
            config=config,
            recorder=runtime.recorder,
            connection_id=config_id,
            dlq_topic=kwargs.get("dlq_topic"),
            poll_timeout=float(kwargs.get("poll_timeout", 1.0)),
            topic_id_resolver=runtime.topic_id_resolver or describe_topic_ids,
        )

    async def filter_shared_stream(self, stream: AsyncIterator[Any]) -> AsyncIterator[TriggerEvent]:
        message: KafkaMessage
        async for message in stream:
            if message.value is None:
                self.tombstones_skipped += 1
                continue
            try:
                text = message.value.decode("utf-8")
            except UnicodeDecodeError:
                reject_shared_stream_event("not UTF-8")
                continue
            yield TriggerEvent(text)


"""The Kafka adapter on the in-memory broker, as unit tests of the whole path build it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sharedstream.kafka.memory import MemoryBroker
from sharedstream.kafka.producer import KafkaSharedStreamProducer
from sharedstream.kafka.rejections import InMemoryRejectionRecorder


def memory_producer(broker: MemoryBroker, kwargs: Mapping[str, Any],
                    group_id: str, batch_size: int = 1000) -> KafkaSharedStreamProducer:
    """What a trigger's ``create_shared_stream_producer`` returns to run on ``broker``:
    fast commits and polls, no statistics, no topic-id polling; ``batch_size`` records
    per ``consume()``."""
    return KafkaSharedStreamProducer(batch_size=batch_size,
        topics=kwargs["topics"], dlq_topic=kwargs["dlq_topic"],
        config={"bootstrap.servers": "memory:9092", "group.id": group_id,
                "statistics.interval.ms": 0},
        recorder=InMemoryRejectionRecorder(), commit_interval=0.01, poll_timeout=0.01,
        consumer_factory=broker.consumer, dlq_producer_factory=broker.producer,
        topic_id_resolver=broker.topic_ids, topic_id_check_interval=3600)

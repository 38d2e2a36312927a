"""Reading a consumer group's committed offsets from outside the group, for tests."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

# The group coordinator is still being elected or loaded (a fresh broker, a new group):
# the answer is "ask again shortly", not a failure.
COORDINATOR_MOVING = frozenset({KafkaError.NOT_COORDINATOR,
                                KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                                KafkaError.COORDINATOR_NOT_AVAILABLE})


def committed_partitions(bootstrap: str, group: str, topic: str,
                         partitions: int = 1) -> list[TopicPartition]:
    """Committed offsets with metadata, without joining the group; waits (up to 10 s)
    while the group's coordinator is not there yet."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    deadline = time.monotonic() + 10
    try:
        while True:
            try:
                return list(consumer.committed(
                    [TopicPartition(topic, p) for p in range(partitions)], timeout=10))
            except KafkaException as exc:
                if exc.args[0].code() not in COORDINATOR_MOVING or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
    finally:
        consumer.close()

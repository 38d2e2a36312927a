"""Every exported metric is declared once, in ``triggerer/metrics.py``, with its help.

The scrape side (every family in a real ``/metrics`` body is in the catalog) is checked
by ``tests/e2e/test_startup.py`` against a running triggerer.
"""

from __future__ import annotations

from sharedstream.kafka.memory import MemoryBroker
from sharedstream.kafka.producer import KafkaSharedStreamProducer
from sharedstream.kafka.rejections import InMemoryRejectionRecorder
from sharedstream.triggerer.metrics import CATALOG, KAFKA_COUNTERS


def test_names_are_unique_and_every_metric_has_help_and_a_kind() -> None:
    names = [spec.name for spec in CATALOG]
    assert len(names) == len(set(names))
    assert all(spec.help.strip() and spec.kind in {"gauge", "counter", "summary"}
               for spec in CATALOG)


def test_every_counter_of_the_kafka_adapter_is_declared() -> None:
    cluster = MemoryBroker({"orders": 1})
    producer = KafkaSharedStreamProducer(
        topics=["orders"], config={"bootstrap.servers": "memory:9092", "group.id": "app"},
        recorder=InMemoryRejectionRecorder(), consumer_factory=cluster.consumer,
        dlq_producer_factory=cluster.producer, topic_id_resolver=cluster.topic_ids)
    assert {name for name, _ in producer.counters().items()} == set(KAFKA_COUNTERS)

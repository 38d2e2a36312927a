"""KafkaSharedStreamTrigger: key, serialize round trip, default filter, group conflicts."""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

import sharedstream
from sharedstream.core.message import KafkaMessage
from sharedstream.kafka.producer import KafkaSharedStreamProducer
from sharedstream.kafka.rejections import InMemoryRejectionRecorder
from sharedstream.kafka.runtime import configure_kafka_runtime, kafka_runtime
from sharedstream.triggers import kafka as trigger_module
from sharedstream.triggers.base import SharedStreamConflictError, check_shared_stream_group
from sharedstream.triggers.kafka import KafkaSharedStreamTrigger


def test_exported_from_the_package_roots() -> None:
    assert sharedstream.KafkaSharedStreamTrigger is KafkaSharedStreamTrigger
    assert sharedstream.triggers.KafkaSharedStreamTrigger is KafkaSharedStreamTrigger


def test_topics_sorted_once_and_key_is_order_independent() -> None:
    a = KafkaSharedStreamTrigger(topics=["b", "a", "b"])
    b = KafkaSharedStreamTrigger(topics=["a", "b"], poll_timeout=2.0)
    assert a.topics == ["a", "b"]
    assert a.shared_stream_key() == ("kafka-shared-stream", ("a", "b"), "kafka_default")
    assert a.shared_stream_key() == b.shared_stream_key()
    assert hash(a.shared_stream_key())
    with pytest.raises(TypeError):
        KafkaSharedStreamTrigger(topics="orders")


def test_serialize_round_trips() -> None:
    t = KafkaSharedStreamTrigger(topics=["o"], kafka_config_id="c", poll_timeout=0.5, dlq_topic="d")
    path, kwargs = t.serialize()
    module, _, name = path.rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    again = cls(**kwargs)
    assert again.serialize() == (path, kwargs)
    assert kwargs == {
        "topics": ["o"],
        "kafka_config_id": "c",
        "poll_timeout": 0.5,
        "dlq_topic": "d",
    }


async def test_default_filter_text_tombstones_and_undecodable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rejected: list[str] = []
    monkeypatch.setattr(trigger_module, "reject_shared_stream_event", rejected.append)

    async def stream() -> AsyncIterator[KafkaMessage]:
        for value in (b"hello", None, b"\xff\xfe", "é".encode()):
            yield KafkaMessage("t", 0, 0, 0, None, value)

    trigger = KafkaSharedStreamTrigger(topics=["t"])
    events = [e.payload async for e in trigger.filter_shared_stream(stream())]
    assert events == ["hello", "é"]
    assert trigger.tombstones_skipped == 1
    assert rejected == ["not UTF-8"]


async def test_run_is_not_supported() -> None:
    with pytest.raises(NotImplementedError):
        await anext(KafkaSharedStreamTrigger(topics=["t"]).run())


class PaidOrders(KafkaSharedStreamTrigger):
    """A user subclass with a filter-only kwarg: it shares the stream of its base class."""

    def __init__(self, *, min_amount: float = 0.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.min_amount = min_amount

    def serialize(self) -> tuple[str, dict[str, Any]]:
        path, kwargs = super().serialize()
        return path, {**kwargs, "min_amount": self.min_amount}


def test_group_conflicts_name_both_watchers_and_the_argument() -> None:
    same = KafkaSharedStreamTrigger(topics=["t"], dlq_topic="d")
    check_shared_stream_group(
        [("w1", same), ("w2", KafkaSharedStreamTrigger(topics=["t"], dlq_topic="d"))])
    other = KafkaSharedStreamTrigger(topics=["t"], dlq_topic="elsewhere")
    with pytest.raises(SharedStreamConflictError,
                       match=r"'w1' and 'w3'.*dlq_topic: 'd' != 'elsewhere'"):
        check_shared_stream_group([("w1", same), ("w2", same), ("w3", other)])
    slower = KafkaSharedStreamTrigger(topics=["t"], dlq_topic="d", poll_timeout=5.0)
    with pytest.raises(SharedStreamConflictError, match=r"'w1' and 'w2'.*poll_timeout"):
        check_shared_stream_group([("w1", same), ("w2", slower)])


def test_subclass_with_filter_only_kwargs_shares_the_group() -> None:
    base = KafkaSharedStreamTrigger(topics=["t"], dlq_topic="d")
    paid = PaidOrders(topics=["t"], dlq_topic="d", min_amount=10.0)
    assert paid.serialize()[1]["min_amount"] == 10.0
    assert paid.shared_stream_arguments() == base.shared_stream_arguments() == {
        "topics": ["t"], "kafka_config_id": "kafka_default", "poll_timeout": 1.0,
        "dlq_topic": "d"}
    check_shared_stream_group([("all", base), ("paid", paid), ("big", PaidOrders(
        topics=["t"], dlq_topic="d", min_amount=1000.0))])
    with pytest.raises(SharedStreamConflictError, match=r"'all' and 'paid'.*dlq_topic"):
        check_shared_stream_group([("all", base), ("paid", PaidOrders(topics=["t"]))])


def test_producer_comes_from_the_runtime_connections() -> None:
    before = kafka_runtime()
    recorder = InMemoryRejectionRecorder()
    configure_kafka_runtime({"c": {"bootstrap.servers": "b:1", "group.id": "g"}}, recorder)
    try:
        trigger = PaidOrders(topics=["y", "x"], kafka_config_id="c", min_amount=3.0)
        producer = PaidOrders.create_shared_stream_producer(trigger.shared_stream_arguments())
        assert isinstance(producer, KafkaSharedStreamProducer)
        assert producer.consumer_group == "g.x+y"
    finally:
        configure_kafka_runtime(before.connections, before.recorder, before.environ)

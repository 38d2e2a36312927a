"""What an Airflow user's definitions need: ``Asset`` as in ``airflow.sdk`` and the Kafka
provider's ``apply_function`` way of making events."""

from __future__ import annotations

import warnings
from collections.abc import AsyncIterator

import pytest

from sharedstream import Asset, KafkaMessage, KafkaMessageTrigger, KafkaSharedStreamTrigger
from sharedstream.triggers.base import TriggerEvent


def test_asset_takes_airflows_signature() -> None:
    by_uri = Asset(uri="kafka://broker:9092/orders", group="sales", extra={"team": "a"})
    assert (by_uri.name, by_uri.uri, by_uri.group, by_uri.extra) == (
        "kafka://broker:9092/orders", "kafka://broker:9092/orders", "sales", {"team": "a"})
    assert Asset("orders").uri == "orders"
    with pytest.raises(TypeError, match="a name or a uri"):
        Asset()
    with pytest.raises(ValueError, match="JSON"):
        Asset("orders", extra={"when": object()})


@pytest.mark.parametrize("uri, warns", [
    ("kafka://orders", True), ("kafka:///orders", True), ("kafka://b1:9092/orders", False),
    ("kafka://b1:9092,b2:9092/orders", False), ("s3://bucket/orders", False)])
def test_a_kafka_uri_airflow_would_refuse_is_a_warning(uri: str, warns: bool) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Asset("orders", uri=uri)
    assert bool([w for w in caught if "kafka://host:port/topic" in str(w.message)]) == warns


def half(message, at_least):  # type: ignore[no-untyped-def]
    """An apply_function as the provider calls it: the message's accessors are methods."""
    n = int(message.value())
    return {"n": n, "offset": message.offset(), "topic": message.topic()} \
        if n % 2 == 0 and n >= at_least else None


async def messages(*values: bytes) -> AsyncIterator[KafkaMessage]:
    for offset, value in enumerate(values):
        yield KafkaMessage("orders", 0, offset, 1_700_000_000_000, None, value)


async def test_apply_function_decides_the_events_and_none_means_no_event() -> None:
    trigger = KafkaMessageTrigger(topics=["orders"], apply_function=f"{__name__}.half",
                                  apply_function_args=[2])
    found = [e async for e in trigger.filter_shared_stream(messages(b"1", b"2", b"0", b"4"))]
    assert found == [TriggerEvent({"n": 2, "offset": 1, "topic": "orders"}),
                     TriggerEvent({"n": 4, "offset": 3, "topic": "orders"})]


def test_it_shares_the_stream_of_its_topics_and_serialises() -> None:
    trigger = KafkaMessageTrigger(topics=["orders"], apply_function=f"{__name__}.half",
                                  apply_function_kwargs={"at_least": 3})
    plain = KafkaSharedStreamTrigger(topics=["orders"])
    assert trigger.shared_stream_key() == plain.shared_stream_key()
    assert trigger.shared_stream_arguments() == plain.shared_stream_arguments()
    classpath, kwargs = trigger.serialize()
    assert KafkaMessageTrigger(**kwargs).serialize() == (classpath, kwargs)


@pytest.mark.parametrize("path, message", [
    ("half", "dotted path"), ("no_such_module.f", "cannot be imported"),
    (f"{__name__}.missing", "cannot be imported"), (f"{__name__}.warnings", "not callable")])
def test_an_apply_function_that_cannot_be_found_is_named(path: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        KafkaMessageTrigger(topics=["orders"], apply_function=path)

"""Issue 41 §2 and §3.5: schema lookups against the real registry (Apicurio), in process.

Every request goes through ``tests/registry_proxy.py``, which counts it and forwards it
to the real registry, and which can answer what Apicurio cannot show: Karapace's 404
for known ids while it reloads after a restart (the proxy's docstring says why a
stand-in is needed for that window alone).

* One lookup per (registry, schema id) per process: declarations that differ (a reader
  schema, a model, none), on different topics, in the loop or in threads, ask once.
* A 404 is the value's fault only past ``missing.schema.grace.sec`` and once the
  registry has shown since that it serves; before, the decode is held.
* An outage logs its start and its end in one line each, no traceback, and counts
  every failed lookup by reason.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from registry_schemas import AVRO_V1, Order

from registry_proxy import RegistryProxy, registry_proxy
from sharedstream.core.message import KafkaMessage, ValueDecodeError
from sharedstream.serde import (
    AvroValue,
    SchemaNotFound,
    SchemaRegistryUnavailable,
    configure_schema_registries,
    registry_problems,
)
from sharedstream.serde.lookups import PAST_GRACE
from sharedstream.serde.registries import health, registry_client, registry_figures
from sharedstream.triggerer.metrics import registry_metrics

pytestmark = pytest.mark.integration
UNKNOWN_ID = 987654
GRACE = "missing.schema.grace.sec"


@pytest.fixture
def proxy(schema_registry: str) -> Iterator[RegistryProxy]:
    with registry_proxy(schema_registry) as made:
        yield made


@pytest.fixture
def configure(proxy: RegistryProxy) -> Iterator[Callable[..., None]]:
    """Make ``it`` the registry behind the proxy, with the given settings."""
    def configure_it(**settings: Any) -> None:
        configure_schema_registries({"it": {"url": proxy.url, **settings}}, environ={})

    yield configure_it
    configure_schema_registries({})


def framed_order(schema_registry: str, order_id: int = 1) -> tuple[int, bytes]:
    """A value framed with a schema id of its own (registered under a fresh subject)."""
    client = SchemaRegistryClient({"url": schema_registry})
    topic = f"lookups-{uuid.uuid4().hex[:8]}"
    value = AvroSerializer(client, AVRO_V1)({"id": order_id, "amount": 2.5},
                                            SerializationContext(topic, MessageField.VALUE))
    return int.from_bytes(value[1:5], "big"), value


def message(value: bytes, topic: str = "orders", offset: int = 0) -> KafkaMessage:
    return KafkaMessage(topic, 0, offset, 0, None, value)


async def test_declarations_topics_and_threads_share_one_lookup_per_schema_id(
        proxy: RegistryProxy, configure: Callable[..., None], schema_registry: str) -> None:
    """Before: each declaration looked its id up in a thread of its own, at the same
    time, and the client's cache is per subject (per topic): three requests here."""
    configure()
    proxy.delay = 0.3  # the askers overlap with the first lookup
    schema_id, value = framed_order(schema_registry)
    declarations = [AvroValue(registry="it", reader_schema=AVRO_V1),
                    AvroValue(registry="it"), AvroValue(registry="it", model=Order)]
    messages = [message(value, topic) for topic in ("orders", "refunds", "audit")]
    waits = [d.prepare(m) for d in declarations for m in messages]
    await asyncio.gather(*(w for w in waits if w is not None))
    assert [m.decoded(declarations[1]) for m in messages] == [{"id": 1, "amount": 2.5}] * 3
    assert messages[0].decoded(declarations[2]) == Order(id=1, amount=2.5)
    assert len(proxy.lookups(schema_id)) == 1

    other_id, _ = framed_order(schema_registry, 2)
    client = registry_client("it")
    with ThreadPoolExecutor(4) as pool:
        schemas = list(pool.map(lambda n: client.get_schema(other_id, f"t{n}-value"),
                                range(4)))
    assert all(s is schemas[0] for s in schemas)
    assert len(proxy.lookups(other_id)) == 1


def test_a_404_while_the_registry_reloads_is_held_then_decoded(
        proxy: RegistryProxy, configure: Callable[..., None], schema_registry: str) -> None:
    """Before: the 404 was the value's fault at once, and the message was dead-lettered."""
    configure()
    schema_id, value = framed_order(schema_registry)
    held = message(value)
    proxy.reloading = True
    for _retry in range(3):
        with pytest.raises(SchemaRegistryUnavailable, match=rf"schema id {schema_id} not found"):
            held.decoded(AvroValue(registry="it"))
    assert registry_problems() and "missing.schema.grace.sec" in registry_problems()[0]
    proxy.reloading = False
    assert held.decoded(AvroValue(registry="it")) == {"id": 1, "amount": 2.5}
    assert registry_problems() == []


def test_a_404_is_final_after_the_grace_once_the_registry_has_shown_it_serves(
        proxy: RegistryProxy, configure: Callable[..., None], schema_registry: str) -> None:
    configure(**{GRACE: 30})
    client = registry_client("it")
    now = [1000.0]
    health("it").clock = lambda: now[0]
    known, _ = framed_order(schema_registry)

    with pytest.raises(SchemaRegistryUnavailable):  # first 404: within the grace
        client.get_schema(UNKNOWN_ID)
    now[0] += 10
    client.get_schema(known)  # the registry serves: it answered after that 404
    now[0] += 21
    with pytest.raises(SchemaNotFound, match=rf"schema id {UNKNOWN_ID}: not found in schema "
                                             r"registry 'it'") as found:
        client.get_schema(UNKNOWN_ID)
    assert isinstance(found.value, ValueDecodeError)  # the value's fault: rejected
    assert proxy.count("/subjects") == 0  # the answer at +10 was proof enough

    proxy.fail_with = 404  # then it serves nothing (a reload, a wrong base path)
    other = UNKNOWN_ID + 1
    with pytest.raises(SchemaRegistryUnavailable):
        client.get_schema(other)
    now[0] += 31
    with pytest.raises(SchemaRegistryUnavailable):  # past the grace, but not serving:
        client.get_schema(other)                    # its subject list 404s too
    assert proxy.count("/subjects") == 1
    proxy.fail_with = None
    now[0] += 1
    with pytest.raises(SchemaNotFound):  # serving again (the subject list answers)
        client.get_schema(other)
    assert proxy.count("/subjects") == 2


def test_a_404_within_the_grace_says_when_the_grace_ends(
        proxy: RegistryProxy, configure: Callable[..., None]) -> None:
    """The hold names the time left of the grace (``retry_after``), so the watcher's
    retry decides then. Before, nothing said it: the retry came at the next backoff
    step past the grace (the README's unknown id: 47-57 s with a 30 s grace)."""
    configure(**{GRACE: 30})
    client = registry_client("it")
    now = [1000.0]
    health("it").clock = lambda: now[0]
    with pytest.raises(SchemaRegistryUnavailable) as first:
        client.get_schema(UNKNOWN_ID)
    assert first.value.retry_after == pytest.approx(30 + PAST_GRACE)
    now[0] += 20
    with pytest.raises(SchemaRegistryUnavailable) as later:
        client.get_schema(UNKNOWN_ID)
    assert later.value.retry_after == pytest.approx(10 + PAST_GRACE)

    proxy.fail_with = 404  # serving nothing: past the grace, not shown to serve
    now[0] += 11
    with pytest.raises(SchemaRegistryUnavailable) as past:
        client.get_schema(UNKNOWN_ID)
    assert past.value.retry_after is None  # no grace left to wait for: backoff alone
    proxy.fail_with = 503  # an outage says nothing either
    with pytest.raises(SchemaRegistryUnavailable) as down:
        client.get_schema(UNKNOWN_ID + 1)
    assert down.value.retry_after is None


def test_an_outage_logs_its_start_and_end_once_and_counts_each_failed_lookup(
        proxy: RegistryProxy, configure: Callable[..., None], schema_registry: str,
        caplog: pytest.LogCaptureFixture) -> None:
    """Before: every retry logged the watcher's traceback (37 of them in one outage)."""
    configure()
    schema_id, value = framed_order(schema_registry)
    caplog.set_level(logging.DEBUG, logger="sharedstream")
    proxy.fail_with = 503
    for _retry in range(5):
        with pytest.raises(SchemaRegistryUnavailable, match="HTTP 503"):
            message(value).decoded(AvroValue(registry="it"))
    [figures] = registry_figures()
    assert (figures.out, figures.failures) == (True, {"http_503": 5})
    proxy.fail_with = None
    assert message(value).decoded(AvroValue(registry="it")) == {"id": 1, "amount": 2.5}
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("sharedstream")]
    assert len(lines) == 2, lines
    assert lines[0].startswith(f"schema registry 'it': HTTP 503 looking up schema id "
                               f"{schema_id} "), lines
    assert lines[1].startswith("schema registry 'it' answers again, after "), lines
    assert "(5 failed lookups)" in lines[1] and not any(r.exc_info for r in caplog.records)
    out, failures = registry_metrics(registry_figures())
    assert [(s.labels, s.value) for s in out.samples] == [({"registry": "it"}, 0.0)]
    assert [(s.name, s.labels, s.value) for s in failures.samples] == [
        ("sharedstream_schema_registry_failures_total", {"registry": "it",
                                                          "reason": "http_503"}, 5.0)]

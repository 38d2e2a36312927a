"""The Kafka destination's registry formats: settings checks and how failures are sorted.

The end-to-end half (a real registry and broker) is in
tests/integration/test_schema_registry.py; here, what needs no registry answer: bad
settings, a missing registry connection, and a registry that refuses connections (a
closed loopback port).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from sharedstream.core.message import Coordinates
from sharedstream.delivery.errors import TransientDeliveryError
from sharedstream.delivery.registry_values import RegistryValues, avro_schema
from sharedstream.delivery.settings import KafkaDestination
from sharedstream.serde.registries import RegistryConfigError, configure_schema_registries
from sharedstream.statestore.events import EventRecord

PAID = json.dumps({"type": "record", "name": "Paid",
                   "fields": [{"name": "id", "type": "int"}]})


def event(payload: object) -> EventRecord:
    return EventRecord(id=7, asset="orders", asset_uri=None, watcher="paid",
                       origin=Coordinates("orders", "tid", 0, 3), event_index=0,
                       created_at=datetime(2026, 1, 2, tzinfo=UTC), payload=payload)


@pytest.fixture
def closed_registry() -> Iterator[str]:
    """A registry id whose url is a loopback port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    configure_schema_registries({"closed": {"url": f"http://127.0.0.1:{port}"}})
    yield "closed"
    configure_schema_registries({})


@pytest.mark.parametrize(("options", "error"), [
    ({"value_format": "protobuf"}, "value_format must be one of json, json_schema, avro"),
    ({"value_format": "avro"}, "value_format 'avro' needs payload_schema"),
    ({"value_format": "json_schema", "payload_schema": "{type"}, "payload_schema is not JSON"),
])
def test_bad_registry_settings_are_refused_naming_the_option(
        options: dict[str, str], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        KafkaDestination(topic="events", **options)  # type: ignore[arg-type]


def test_a_destination_naming_an_unconfigured_registry_fails_at_start_up() -> None:
    configure_schema_registries({}, environ={})
    with pytest.raises(RegistryConfigError, match="schema registry 'nowhere' is not configured"):
        RegistryValues(KafkaDestination(topic="events", value_format="json_schema",
                                        schema_registry="nowhere"))


def test_a_registry_refusing_connections_holds_the_batch(closed_registry: str) -> None:
    values = RegistryValues(KafkaDestination(topic="events", value_format="json_schema",
                                             schema_registry=closed_registry))
    [held] = values.bodies([event({"id": 1}), event({"id": 2})])
    assert isinstance(held, TransientDeliveryError)
    assert str(held).startswith("schema registry 'closed': "), held


def test_the_avro_schema_holds_the_event_document() -> None:
    schema = json.loads(avro_schema(PAID))
    assert [f["name"] for f in schema["fields"]] == [
        "id", "identity", "asset", "asset_uri", "watcher", "source", "created_at", "payload"]
    assert schema["fields"][-1]["type"] == json.loads(PAID)

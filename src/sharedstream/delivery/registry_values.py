"""The Kafka destination's typed values: the event document with a registered schema.

With ``value_format = "avro"`` or ``"json_schema"`` the destination writes each event
document (the JSON one's fields: ``id``, ``identity``, ``asset``, ``asset_uri``,
``watcher``, ``source``, ``created_at``, ``payload``) through confluent-kafka's
serialiser: Confluent framing (byte 0, the schema id, the body), the schema registered
under ``<topic>-value`` on first use, so any registry-aware consumer reads typed events.
The document's schema is sharedstream's own (:func:`avro_schema`, :func:`json_schema`);
``payload_schema`` types the payload, which events of any shape share otherwise.

What can go wrong, sorted as deliveries are:

* the registry cannot be asked, or refuses the schema (down, 5xx, 401, an
  incompatible version 409, a connection not configured): transient, the cursor holds
  and the destination retries with backoff, so a fix delivers every event; this is the
  destination's fault, never one event's;
* an event whose payload the schema cannot hold: permanent, that event is recorded
  undelivered with the serialiser's reason and the next one follows.

Registration and the first schema lookup are HTTP calls, so :meth:`RegistryValues.bodies`
runs off the event loop (the sender calls it in a thread); after the first event the
serialiser's cache answers.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from sharedstream.delivery.document import event_document
from sharedstream.delivery.errors import (
    DeliveryError,
    PermanentDeliveryError,
    TransientDeliveryError,
)
from sharedstream.delivery.settings import KafkaDestination
from sharedstream.serde.lookups import unreachable
from sharedstream.serde.registries import RegistryConfigError, registry_client
from sharedstream.statestore.events import EventRecord

_NULLABLE_STRING: list[Any] = ["null", "string"]


def avro_schema(payload_schema: str) -> str:
    """The Avro record ``sharedstream.AssetEvent``, its payload of type ``payload_schema``."""
    source = {"type": "record", "name": "Source", "fields": [
        {"name": "topic", "type": "string"},
        {"name": "topic_id", "type": _NULLABLE_STRING, "default": None},
        {"name": "partition", "type": "int"},
        {"name": "offset", "type": "long"},
        {"name": "event_index", "type": "int"}]}
    return json.dumps({"type": "record", "name": "AssetEvent", "namespace": "sharedstream",
                       "fields": [
                           {"name": "id", "type": "long"},
                           {"name": "identity", "type": "string"},
                           {"name": "asset", "type": "string"},
                           {"name": "asset_uri", "type": _NULLABLE_STRING, "default": None},
                           {"name": "watcher", "type": "string"},
                           {"name": "source", "type": source},
                           {"name": "created_at", "type": "string"},
                           {"name": "payload", "type": json.loads(payload_schema)}]})


def json_schema(payload_schema: str | None) -> str:
    """The JSON Schema of the event document, its payload checked by ``payload_schema``."""
    def strings(*names: str) -> dict[str, Any]:
        return {name: {"type": "string"} for name in names}
    source = {"type": "object", "required": ["topic", "partition", "offset", "event_index"],
              "properties": {**strings("topic"), "topic_id": {"type": ["string", "null"]},
                             "partition": {"type": "integer"}, "offset": {"type": "integer"},
                             "event_index": {"type": "integer"}}}
    required = ["id", "identity", "asset", "watcher", "source", "created_at", "payload"]
    return json.dumps({
        "$schema": "http://json-schema.org/draft-07/schema#", "title": "AssetEvent",
        "type": "object", "required": required,
        "properties": {"id": {"type": "integer"}, **strings("identity", "asset", "watcher"),
                       "asset_uri": {"type": ["string", "null"]}, "source": source,
                       "created_at": {"type": "string"},
                       "payload": json.loads(payload_schema) if payload_schema else {}}})


class RegistryValues:
    """Serialises a destination's event documents with its registered schema."""

    def __init__(self, options: KafkaDestination) -> None:
        self._options = options
        self._client: Any = None
        self._serializer: Callable[..., bytes] | None = None
        registry_client(options.schema_registry)  # a missing connection fails at start-up

    def _serialise(self) -> Callable[..., bytes]:
        client = registry_client(self._options.schema_registry)
        if self._serializer is None or client is not self._client:
            if self._options.value_format == "avro":
                from confluent_kafka.schema_registry.avro import AvroSerializer
                assert self._options.payload_schema is not None  # checked by the settings
                self._serializer = AvroSerializer(client, avro_schema(self._options.payload_schema))
            else:
                from confluent_kafka.schema_registry.json_schema import JSONSerializer
                self._serializer = JSONSerializer(json_schema(self._options.payload_schema),
                                                  client)
            self._client = client
        return self._serializer

    def bodies(self, events: Sequence[EventRecord]) -> list[bytes | DeliveryError]:
        """Each event's framed value, or why it has none; stops after a transient error
        (the events after it wait with the cursor). Blocking: call it in a thread."""
        from confluent_kafka.serialization import MessageField, SerializationContext
        context = SerializationContext(self._options.topic, MessageField.VALUE)
        out: list[bytes | DeliveryError] = []
        for event in events:
            try:
                out.append(self._serialise()(event_document(event), context))
            except Exception as exc:
                error = self._classified(exc)
                out.append(error)
                if isinstance(error, TransientDeliveryError):
                    break
        return out

    def _classified(self, exc: Exception) -> DeliveryError:
        from confluent_kafka.schema_registry.error import SchemaRegistryError
        registry = self._options.schema_registry
        if isinstance(exc, SchemaRegistryError):
            return TransientDeliveryError(
                f"schema registry {registry!r}: HTTP {exc.http_status_code} for the "
                f"{self._options.value_format} schema of {self._options.topic}-value "
                f"({exc.error_message})", f"registry_http_{exc.http_status_code}")
        if isinstance(exc, RegistryConfigError) or unreachable(exc):
            return TransientDeliveryError(f"schema registry {registry!r}: "
                                          f"{type(exc).__name__}: {exc}", "registry_unavailable")
        return PermanentDeliveryError(
            f"the event does not fit the {self._options.value_format} schema of "
            f"{self._options.topic}-value: {exc}", "schema_mismatch")

"""The value deserialisers a watcher declares: text, JSON, and schema-registry formats.

Each is a frozen dataclass, so equal declarations are one decoder: watchers of a group
that declare ``AvroValue(model=Order)`` share one decode per message through
:meth:`KafkaMessage.decoded <sharedstream.core.message.KafkaMessage.decoded>`, and a
different deserialiser decodes once on its own.

Schema-registry values (Confluent framing: byte 0, a 4-byte schema id, the body) are
read by ``confluent_kafka.schema_registry``'s deserialisers. What goes wrong is sorted
in two:

* the value's fault, a :class:`ValueDecodeError` (the watcher rejects the message,
  the reason names the schema id and the error): a first byte other than 0, a value
  too short to be framed, a schema id the registry does not know (HTTP 404, once
  :mod:`sharedstream.serde.lookups` says the 404 is final), bytes the writer schema
  cannot read, a value the JSON Schema refuses, a model that does not fit;
* not the value's fault, a :class:`SchemaRegistryUnavailable` (an
  ``InfrastructureError``: the message is held and redelivered with backoff, never
  counted towards ``max_attempts``, never dead-lettered): the registry refusing
  connections, timing out, answering 5xx or 401/403, a 404 not final yet, or a
  registry connection that is not configured.

Lookups are shared by the registry client (one per registry id, see
:mod:`sharedstream.serde.lookups`) and parsed schemas kept by the deserialiser (one per
declaration): a lookup happens once per schema id per registry and process. A cache miss never runs
on the event loop when the value is read through ``self.decoded(stream)`` or the stock
trigger: they await :meth:`prepare` first, which decodes the first message of a schema
id in a worker thread (one at a time per id and registry, whatever the declaration;
the others wait for it), bounded by the
connection's ``timeout``. Calling ``msg.decoded(d)`` directly decodes on the loop, a
cache miss included. During an outage each redelivery pays one failed request, after
backoff, in that thread.
"""

from __future__ import annotations

import asyncio
import importlib
import struct
import sys
import threading
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any

from sharedstream.core.message import KafkaMessage, ValueDecodeError
from sharedstream.serde.lookups import SchemaRegistryUnavailable, unreachable
from sharedstream.serde.models import model_converter
from sharedstream.serde.registries import (
    DEFAULT_REGISTRY,
    RegistryConfigError,
    health,
    registry_client,
)


@dataclass(frozen=True, slots=True)
class TextValue:
    """The value as UTF-8 text (shared with :attr:`KafkaMessage.text`)."""

    def decode(self, value: bytes, message: KafkaMessage) -> Any:
        return message.text


@dataclass(frozen=True, slots=True)
class JsonValue:
    """The value parsed as JSON (shared with :attr:`KafkaMessage.json`), validated into
    ``model`` when one is given."""

    model: type[Any] | None = None

    def __post_init__(self) -> None:
        _checked_model(self, self.model)

    def decode(self, value: bytes, message: KafkaMessage) -> Any:
        parsed = message.json
        return parsed if self.model is None else _converter(self.model)(parsed)


@dataclass(frozen=True, slots=True)
class _RegistryModelValue:
    """What the registry's Avro and JSON Schema declarations share: the registry, an
    optional model, one decode per message through the shared lookups."""

    registry: str = DEFAULT_REGISTRY
    model: type[Any] | None = None

    def __post_init__(self) -> None:
        _checked_model(self, self.model)

    def decode(self, value: bytes, message: KafkaMessage) -> Any:
        return _registry_decode(self, self.registry, self.model, value, message)

    def prepare(self, message: KafkaMessage) -> Awaitable[None] | None:
        return _prepare(self, self.registry, message)


@dataclass(frozen=True, slots=True)
class AvroValue(_RegistryModelValue):
    """A Confluent-framed Avro value, read with its writer schema from ``registry``.

    ``reader_schema`` (Avro JSON text) resolves every writer version to one shape, as
    Avro's schema evolution does; without it the value has the writer's fields. The
    record becomes a dict, or ``model`` when one is given.
    """

    reader_schema: str | None = None

    def build(self, client: Any) -> Callable[..., Any]:
        from confluent_kafka.schema_registry.avro import AvroDeserializer
        return AvroDeserializer(  # type: ignore[no-any-return]
            client, schema_str=self.reader_schema, conf=_subjects())


@dataclass(frozen=True, slots=True)
class JsonSchemaValue(_RegistryModelValue):
    """A Confluent-framed JSON value, validated against its registered JSON Schema (the
    writer's), then into ``model`` when one is given."""

    def build(self, client: Any) -> Callable[..., Any]:
        from confluent_kafka.schema_registry.json_schema import JSONDeserializer
        return JSONDeserializer(  # type: ignore[no-any-return]
            None, schema_registry_client=client, conf=_subjects())


@dataclass(frozen=True, slots=True)
class ProtobufValue:
    """A Confluent-framed Protobuf value, parsed into ``message_type`` (the generated
    class): the message object is the typed value."""

    message_type: type[Any]
    registry: str = DEFAULT_REGISTRY

    def __post_init__(self) -> None:
        if not (isinstance(self.message_type, type) and hasattr(self.message_type, "DESCRIPTOR")
                and hasattr(self.message_type, "FromString")):
            raise TypeError(f"ProtobufValue: message_type {self.message_type!r} is not a "
                            "generated Protobuf message class (the class protoc generates "
                            "for a message, e.g. orders_pb2.Order)")

    def decode(self, value: bytes, message: KafkaMessage) -> Any:
        return _registry_decode(self, self.registry, None, value, message)

    def prepare(self, message: KafkaMessage) -> Awaitable[None] | None:
        return _prepare(self, self.registry, message)

    def build(self, client: Any) -> Callable[..., Any]:
        from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
        return ProtobufDeserializer(  # type: ignore[no-any-return]
            self.message_type, {"use.deprecated.format": False, **_subjects()},
            schema_registry_client=client)


def _subjects() -> dict[str, Any]:
    """Subjects named after the topic, chosen here: confluent-kafka 2.16's default asks
    the registry for the topic's subject first, one more request per declaration and
    topic, outside the shared lookups (serde.lookups)."""
    from confluent_kafka.schema_registry import topic_subject_name_strategy
    return {"subject.name.strategy": topic_subject_name_strategy}


_lock = threading.Lock()
_converters: dict[type[Any], Callable[[Any], Any]] = {}
# declaration -> (the registry client it was built with, the confluent deserialiser)
_deserializers: dict[Hashable, tuple[Any, Callable[..., Any]]] = {}
# (declaration, client, schema id) decoded once already: its schemas are in the caches.
_known: set[tuple[Hashable, Any, int]] = set()
# (loop, client, schema id) -> the lock its first lookup runs under.
_lookups: dict[tuple[int, Any, int], asyncio.Lock] = {}


def _converter(model: type[Any]) -> Callable[[Any], Any]:
    found = _converters.get(model)
    if found is None:
        found = _converters[model] = model_converter(model)
    return found


def _checked_model(declaration: Any, model: type[Any] | None) -> None:
    """Refuse a ``model=`` that is no model when the watcher is declared (``check`` and
    ``run`` fail loading the module, naming it), not on its first message."""
    if model is not None:
        try:
            _converter(model)
        except TypeError as exc:
            raise TypeError(f"{type(declaration).__name__}(model="
                            f"{getattr(model, '__qualname__', model)}): {exc}") from None


def framed_schema_id(value: bytes) -> int:
    """The schema id of a Confluent-framed value; :class:`ValueDecodeError` when the
    value is not framed."""
    if len(value) < 6:
        raise ValueDecodeError(
            f"not schema-registry framed: {len(value)} bytes, a framed value has 6 or more")
    if value[0] != 0:
        raise ValueDecodeError(
            f"not schema-registry framed: first byte 0x{value[0]:02x}, expected 0x00 "
            "(magic byte)")
    schema_id: int = struct.unpack_from(">I", value, 1)[0]
    return schema_id


def _prepare(declaration: Any, registry: str, message: KafkaMessage
             ) -> Awaitable[None] | None:
    """None when decoding ``message`` now asks the registry nothing (its schema id was
    decoded before, the value is not framed, or it is decoded already); else the
    awaitable that decodes it in a worker thread, whose result or ValueDecodeError the
    message keeps, so the decode on the loop that follows is a cache hit. Before the
    registry client's package is imported (0.4 to 1.3 s on a loaded machine), the
    awaitable imports it in a worker thread first: building the client imports it."""
    value = message.value
    if value is None or len(value) < 6 or value[0] != 0 or declaration in message.__dict__:
        return None
    if _CLIENT_MODULE not in sys.modules:
        return _import_then_prepare(declaration, registry, message)
    try:
        client = registry_client(registry)
    except RegistryConfigError:
        return None  # decoding raises at once, without a request
    key = (declaration, client, struct.unpack_from(">I", value, 1)[0])
    return None if key in _known else _first_lookup(key, declaration, message)


_CLIENT_MODULE = "confluent_kafka.schema_registry"


async def _import_then_prepare(declaration: Any, registry: str, message: KafkaMessage) -> None:
    try:
        await asyncio.to_thread(importlib.import_module, _CLIENT_MODULE)
    except ImportError:
        return  # decoding raises at once, naming the extra to install
    lookup = _prepare(declaration, registry, message)
    if lookup is not None:
        await lookup


async def _first_lookup(key: tuple[Hashable, Any, int], declaration: Any,
                        message: KafkaMessage) -> None:
    # One lookup per schema id and registry at a time: the watchers of every declaration
    # and the next messages of the id wait for it in the loop, not each in a thread of
    # its own (the client's single flight would hold those threads meanwhile).
    lock_key = (id(asyncio.get_running_loop()), *key[1:])
    lock = _lookups.setdefault(lock_key, asyncio.Lock())
    async with lock:
        if key in _known or declaration in message.__dict__:
            return
        await asyncio.to_thread(message.decoded, declaration)
        _known.add(key)
    _lookups.pop(lock_key, None)


def _registry_decode(declaration: Any, registry: str, model: type[Any] | None, value: bytes,
                     message: KafkaMessage) -> Any:
    schema_id = framed_schema_id(value)
    deserializer = _deserializer(declaration, registry)
    from confluent_kafka.serialization import MessageField, SerializationContext
    try:
        decoded = deserializer(value, SerializationContext(message.topic, MessageField.VALUE))
    except Exception as exc:
        raise _classified(exc, registry, schema_id) from None
    return decoded if model is None else _converter(model)(decoded)


def _deserializer(declaration: Any, registry: str) -> Callable[..., Any]:
    try:
        client = registry_client(registry)
    except RegistryConfigError as exc:
        # Held, not rejected: a fixed config delivers the message, a dead letter would not.
        health(registry).failed(str(exc).removeprefix(f"schema registry {registry!r}")
                                .lstrip(": "), "not_configured")
        raise SchemaRegistryUnavailable(str(exc)) from None
    cached = _deserializers.get(declaration)
    if cached is not None and cached[0] is client:
        return cached[1]
    with _lock:
        built: Callable[..., Any] = declaration.build(client)
        _deserializers[declaration] = (client, built)
    return built


def _classified(exc: Exception, registry: str, schema_id: int) -> Exception:
    """What the deserialiser raised, sorted: the lookups (serde.lookups) sorted theirs
    already (held, or the value's fault); a registry failure outside them (a request
    of the deserialiser's own) is an outage; everything else is the value's fault."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError
    if isinstance(exc, (SchemaRegistryUnavailable, ValueDecodeError)):
        return exc
    if isinstance(exc, SchemaRegistryError) or unreachable(exc):
        why = (f"HTTP {exc.http_status_code}" if isinstance(exc, SchemaRegistryError)
               else type(exc).__name__)
        return SchemaRegistryUnavailable(
            f"schema registry {registry!r}: {why} looking up schema id {schema_id} ({exc})")
    return ValueDecodeError(f"schema id {schema_id}: {type(exc).__name__}: {exc}")

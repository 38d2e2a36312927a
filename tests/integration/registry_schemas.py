"""The schemas of the registry tests, shared by the test and its watcher module.

Each format has a version 1 and a backward-compatible version 2, which the evolution
tests register second: Avro and Protobuf add a field (with a default, a new tag); JSON
Schema makes ``amount`` optional, because this registry's JSON Schema check refuses
every added property as incompatible (open or closed content model alike).

The Protobuf messages are built from descriptors (no protoc step): version 1 in the
default pool, as a generated module would be; version 2 in a pool of its own, because
both declare ``sharedstream.test.Order``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

REGISTRY = "it_registry"

AVRO_V1 = json.dumps({"type": "record", "name": "Order", "namespace": "sharedstream.test",
                      "fields": [{"name": "id", "type": "int"},
                                 {"name": "amount", "type": "double"}]})
AVRO_V2 = json.dumps({"type": "record", "name": "Order", "namespace": "sharedstream.test",
                      "fields": [{"name": "id", "type": "int"},
                                 {"name": "amount", "type": "double"},
                                 {"name": "note", "type": "string", "default": ""}]})

JSON_SCHEMA_V1 = json.dumps({
    "$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "type": "object",
    "properties": {"id": {"type": "integer"}, "amount": {"type": "number"}},
    "required": ["id", "amount"]})
JSON_SCHEMA_V2 = json.dumps({
    "$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "type": "object",
    "properties": {"id": {"type": "integer"}, "amount": {"type": "number"}},
    "required": ["id"]})


@dataclass
class Order:
    """The typed value the watchers validate into (a field the writer added is ignored)."""

    id: int
    amount: float


def _order_file(with_note: bool) -> descriptor_pb2.FileDescriptorProto:
    scalar = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(
        name="sharedstream_test/order.proto", package="sharedstream.test", syntax="proto3")
    message = proto.message_type.add(name="Order")
    message.field.add(name="id", number=1, type=scalar.TYPE_INT32, label=scalar.LABEL_OPTIONAL)
    message.field.add(name="amount", number=2, type=scalar.TYPE_DOUBLE,
                      label=scalar.LABEL_OPTIONAL)
    if with_note:
        message.field.add(name="note", number=3, type=scalar.TYPE_STRING,
                          label=scalar.LABEL_OPTIONAL)
    return proto


def _order_class(pool: descriptor_pool.DescriptorPool, with_note: bool) -> type[Any]:
    pool.Add(_order_file(with_note))
    cls: type[Any] = message_factory.GetMessageClass(
        pool.FindMessageTypeByName("sharedstream.test.Order"))
    return cls


OrderV1 = _order_class(descriptor_pool.Default(), with_note=False)
OrderV2 = _order_class(descriptor_pool.DescriptorPool(), with_note=True)

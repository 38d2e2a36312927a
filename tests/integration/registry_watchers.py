"""Watcher module of tests/integration/test_schema_registry.py: one watcher per format.

Every watcher is the plain ``KafkaSharedStreamTrigger``: its event is the decoded value
(a model as its fields). Avro has two: ``avro_v1`` reads every writer version with the
version 1 reader schema into ``Order``, ``avro_writer`` gets the writer's own fields.
The registry is ``it_registry``, whose url the test sets in the environment. With
``$REGISTRY_AVRO_BATCH`` set, ``avro_batch``, a batch filter asking ``msg.decoded`` itself
(a declaration of its own: its own first lookup), watches the Avro topic too.
"""

from __future__ import annotations

import os

from registry_schemas import AVRO_V1, REGISTRY, Order, OrderV1

from sharedstream import Asset, AssetWatcher, KafkaSharedStreamTrigger, MessageBatch, TriggerEvent
from sharedstream.core.message import ValueDecodeError
from sharedstream.serde import AvroValue, JsonSchemaValue, ProtobufValue


def watcher(name: str, topic: str, deserializer: object) -> AssetWatcher:
    return AssetWatcher(name, KafkaSharedStreamTrigger(
        topics=[topic], kafka_config_id="registry", value_deserializer=deserializer))


class DecodedBatch(KafkaSharedStreamTrigger):
    """One event per message, its value as the watcher's deserialiser reads it."""

    async def filter_shared_batch(self, batch: MessageBatch) -> None:
        for message in batch:
            try:
                value = message.decoded(self.value_deserializer)
            except ValueDecodeError as exc:
                batch.reject(message, exc.reason)
                continue
            batch.emit(message, TriggerEvent(value))


AVRO_TOPIC = os.environ["REGISTRY_AVRO_TOPIC"]
JSON_SCHEMA_TOPIC = os.environ["REGISTRY_JSON_SCHEMA_TOPIC"]
PROTOBUF_TOPIC = os.environ["REGISTRY_PROTOBUF_TOPIC"]

avro = Asset("registry_avro", uri=f"kafka://localhost:9092/{AVRO_TOPIC}", watchers=[
    watcher("avro_v1", AVRO_TOPIC, AvroValue(registry=REGISTRY, model=Order,
                                             reader_schema=AVRO_V1)),
    watcher("avro_writer", AVRO_TOPIC, AvroValue(registry=REGISTRY)),
    *([AssetWatcher("avro_batch", DecodedBatch(
        topics=[AVRO_TOPIC], kafka_config_id="registry",
        value_deserializer=AvroValue(registry=REGISTRY, reader_schema=AVRO_V1)))]
      if os.environ.get("REGISTRY_AVRO_BATCH") else []),
])
json_schema = Asset("registry_json_schema", uri=f"kafka://localhost:9092/{JSON_SCHEMA_TOPIC}",
                    watchers=[watcher("json_schema", JSON_SCHEMA_TOPIC,
                                      JsonSchemaValue(registry=REGISTRY, model=Order))])
protobuf = Asset("registry_protobuf", uri=f"kafka://localhost:9092/{PROTOBUF_TOPIC}",
                 watchers=[watcher("protobuf", PROTOBUF_TOPIC,
                                   ProtobufValue(OrderV1, registry=REGISTRY))])

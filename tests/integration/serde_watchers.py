"""Watcher module of tests/integration/test_serde_values.py: typed values, decoded once.

On ``$SERDE_TOPIC`` (one group): three ``Paid`` watchers declare the same deserialiser,
``JsonValue(model=Order)``, and ``audit`` declares another, ``JsonValue(model=Seen)``.
Each model counts its constructions in ``DECODES``, and every event carries the count
when it was made, so the test reads from the events how many times each model was
built: once per message if the three watchers share the decode, three times if not.

On ``$SERDE_AVRO_TOPIC`` (a second group), ``avro`` reads Avro through the registry
``serde_registry``, whose url the test sets in the environment.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import msgspec

from sharedstream import Asset, AssetWatcher, KafkaSharedStreamTrigger, TriggerEvent
from sharedstream.serde import AvroValue, JsonValue

TOPIC = os.environ["SERDE_TOPIC"]
AVRO_TOPIC = os.environ["SERDE_AVRO_TOPIC"]
DECODES = {"Order": 0, "Seen": 0}


class Order(msgspec.Struct):
    id: int
    status: str
    amount: float

    def __post_init__(self) -> None:
        DECODES["Order"] += 1


@dataclass
class Seen:
    id: int

    def __post_init__(self) -> None:
        DECODES["Seen"] += 1


class Paid(KafkaSharedStreamTrigger):
    async def filter_shared_stream(self, stream: AsyncIterator[Any]
                                   ) -> AsyncIterator[TriggerEvent]:
        async for _message, order in self.decoded(stream):
            if order.status == "paid":
                yield TriggerEvent({"id": order.id, "decodes": DECODES["Order"]})


class Audit(KafkaSharedStreamTrigger):
    async def filter_shared_stream(self, stream: AsyncIterator[Any]
                                   ) -> AsyncIterator[TriggerEvent]:
        async for _message, seen in self.decoded(stream):
            yield TriggerEvent({"id": seen.id, "decodes": DECODES["Seen"]})


def paid() -> Paid:
    return Paid(topics=[TOPIC], kafka_config_id="serde", value_deserializer=JsonValue(Order))


orders = Asset("serde_orders", uri=f"kafka://localhost:9092/{TOPIC}", watchers=[
    AssetWatcher("paid_a", paid()),
    AssetWatcher("paid_b", paid()),
    AssetWatcher("paid_c", paid()),
    AssetWatcher("audit", Audit(topics=[TOPIC], kafka_config_id="serde",
                                value_deserializer=JsonValue(Seen))),
])

avro = Asset("serde_avro", uri=f"kafka://localhost:9092/{AVRO_TOPIC}", watchers=[
    AssetWatcher("avro", KafkaSharedStreamTrigger(
        topics=[AVRO_TOPIC], kafka_config_id="serde",
        value_deserializer=AvroValue(registry="serde_registry"))),
])

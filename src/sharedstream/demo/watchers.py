"""The demo's watcher module: two watchers sharing one consumer of ``demo.orders``.

Messages are JSON orders such as ``{"id": 42, "status": "paid", "amount": 19.5}``;
ids grow within each partition.

* ``valid_orders`` records every well-formed order and rejects anything else (not
  JSON, a missing field) with a reason: the rejected message goes to
  ``demo.orders.dlq`` with that reason in its headers, and the offset still moves on.
* ``paid_orders`` records paid orders and keeps a per-partition watermark
  (``last_seen/<partition>``) in the asset state store. The watermark is written with
  ``aadvance`` while the message is handled, so it commits in the same transaction as
  the event: after any crash or outage, it never runs ahead of (or lags behind) the
  events it describes. It rejects an order without an amount (it cannot price it);
  any other message it cannot read is skipped: reporting it is ``valid_orders``'s job,
  and one dead-letter record names every rejecting watcher anyway.

Mid-run the demo "deploys a fix" (:data:`FREE_ORDERS`: an order without an amount is
a free order) and replays the dead letters rejected for a missing amount. The replay
reaches both watchers through ``demo.orders.dlq.replay``; ``paid_orders`` handles it
although its watermark moved past it (``message.is_replay``).

Both triggers take the same group arguments (topic, connection, dead-letter topic),
so the triggerer runs them on one shared consumer group.
"""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator
from typing import Any

from sharedstream import (
    Asset,
    AssetWatcher,
    KafkaMessage,
    KafkaSharedStreamTrigger,
    TriggerEvent,
    reject_shared_stream_event,
)
from sharedstream.kafka.dlq_headers import replay_topic_name

TOPIC = "demo.orders"
DLQ_TOPIC = "demo.orders.dlq"
REPLAY_TOPIC = replay_topic_name(DLQ_TOPIC)
CONNECTION = "demo"
REQUIRED_FIELDS = ("id", "status", "amount")
MISSING_AMOUNT = "missing field 'amount'"
# Set when the demo deploys its fix: an order without an amount is then a free one.
FREE_ORDERS = threading.Event()


def parse_order(value: bytes | None) -> dict[str, Any] | str:
    """The order in ``value``, or the reason it is not one."""
    if value is None:
        return "empty message"
    try:
        order = json.loads(value)
    except ValueError:
        return "not JSON"
    if not isinstance(order, dict):
        return "not a JSON object"
    if "amount" not in order and FREE_ORDERS.is_set():
        order["amount"] = 0.0
    for name in REQUIRED_FIELDS:
        if name not in order:
            return f"missing field {name!r}"
    if not isinstance(order["id"], int):
        return "id is not an integer"
    return order


class ValidOrders(KafkaSharedStreamTrigger):
    """Every well-formed order is an event; anything else is dead-lettered with a reason."""

    async def filter_shared_stream(
        self, stream: AsyncIterator[Any]
    ) -> AsyncIterator[TriggerEvent]:
        message: KafkaMessage
        async for message in stream:
            order = parse_order(message.value)
            if isinstance(order, str):
                reject_shared_stream_event(order)
                continue
            yield TriggerEvent(order)


class PaidOrders(KafkaSharedStreamTrigger):
    """Paid orders, each once, behind a per-partition ``last_seen`` watermark."""

    async def filter_shared_stream(
        self, stream: AsyncIterator[Any]
    ) -> AsyncIterator[TriggerEvent]:
        message: KafkaMessage
        async for message in stream:
            order = parse_order(message.value)
            if order == MISSING_AMOUNT:
                reject_shared_stream_event("missing amount")
                continue
            if isinstance(order, str) or order["status"] != "paid":
                continue
            key = f"last_seen/{message.partition}"
            last_seen = await self.asset_state_store.aget(key, default=-1)
            if order["id"] <= last_seen and not message.catching_up:
                continue  # a crash redelivery of something already recorded
            await self.asset_state_store.aadvance(key, order["id"])  # never backwards
            yield TriggerEvent(order)


def _trigger(cls: type[KafkaSharedStreamTrigger]) -> KafkaSharedStreamTrigger:
    return cls(topics=[TOPIC], kafka_config_id=CONNECTION, dlq_topic=DLQ_TOPIC,
               poll_timeout=0.1)


URI = f"kafka://localhost:9092/{TOPIC}"  # Airflow's Kafka form: bootstrap, then topic
valid_orders = Asset("valid_orders", uri=URI,
                     watchers=[AssetWatcher("valid_orders", _trigger(ValidOrders))])
paid_orders = Asset("paid_orders", uri=URI,
                    watchers=[AssetWatcher("paid_orders", _trigger(PaidOrders))])

"""An incremental orders feed: the example watcher module of the README and docker-compose.

Messages on the ``orders`` topic are JSON objects such as
``{"id": 42, "status": "paid", "amount": 19.5}``; ids grow per partition.

* ``paid_orders`` keeps a per-partition watermark (``last_seen/<partition>``) in the
  asset state store: an order at or below it is a replay of something already
  handled and is skipped; a paid order without an amount is rejected to
  ``orders.dlq`` with a reason. The watermark is written with ``aadvance`` while
  the message is handled, so it commits in the same transaction as the event.
* ``orders_audit`` records every order as text (the default filter of
  ``KafkaSharedStreamTrigger``), sharing the same consumer.

Run: ``sharedstream run examples/orders_watchers.py --config examples/sharedstream.toml``.
"""

from __future__ import annotations

import json
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

TOPICS = ["orders"]
DLQ = "orders.dlq"


class PaidOrders(KafkaSharedStreamTrigger):
    """Paid orders, each once, in id order per partition."""

    async def filter_shared_stream(
        self, stream: AsyncIterator[Any]
    ) -> AsyncIterator[TriggerEvent]:
        message: KafkaMessage
        async for message in stream:
            if message.value is None:
                continue
            try:
                order = json.loads(message.value)
            except ValueError as exc:
                reject_shared_stream_event(f"not JSON: {exc}")
                continue
            if not isinstance(order, dict) or not isinstance(order.get("id"), int):
                reject_shared_stream_event("order without an integer id")
                continue
            if order.get("status") != "paid":
                continue
            if order.get("amount") is None:
                reject_shared_stream_event("missing amount")
                continue
            key = f"last_seen/{message.partition}"
            if order["id"] <= await self.asset_state_store.aget(key, default=-1):
                continue
            await self.asset_state_store.aadvance(key, order["id"])
            yield TriggerEvent(order)


paid_orders = Asset(
    "paid_orders",
    uri="kafka://orders?status=paid",
    watchers=[AssetWatcher("paid_orders", PaidOrders(topics=TOPICS, dlq_topic=DLQ))],
)

orders_audit = Asset(
    "orders_audit",
    uri="kafka://orders",
    watchers=[
        AssetWatcher("orders_audit", KafkaSharedStreamTrigger(topics=TOPICS, dlq_topic=DLQ))
    ],
)

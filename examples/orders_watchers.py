"""An orders feed: the watcher module docker-compose runs, on the ``orders`` topic.

Messages are JSON orders such as ``{"id": 42, "status": "paid", "amount": 19.5}``;
ids grow per partition. The filters are the demo's (``sharedstream.demo.watchers``,
read it for the code), declared here on your own topic and connection:

* ``valid_orders`` records every well-formed order and rejects anything else (not
  JSON, a missing field) to ``orders.dlq`` with the reason in its headers;
* ``paid_orders`` records paid orders behind a per-partition ``last_seen/<partition>``
  watermark in the asset state store, advanced with ``aadvance`` while the message is
  handled, so it commits in the same transaction as the event;
* ``orders_audit`` records every order as text: the default filter of
  ``KafkaSharedStreamTrigger``.

All three take the same group arguments, so they share one consumer.

Run: ``sharedstream run examples/orders_watchers.py --config examples/sharedstream.toml``.
"""

from __future__ import annotations

from sharedstream import Asset, AssetWatcher, KafkaSharedStreamTrigger
from sharedstream.demo.watchers import PaidOrders, ValidOrders

TOPICS = ["orders"]
DLQ = "orders.dlq"

URI = "kafka://localhost:9092/orders"  # Airflow's Kafka form: bootstrap, then topic

valid_orders = Asset("valid_orders", uri=URI, watchers=[
    AssetWatcher("valid_orders", ValidOrders(topics=TOPICS, dlq_topic=DLQ))])
paid_orders = Asset("paid_orders", uri=URI, watchers=[
    AssetWatcher("paid_orders", PaidOrders(topics=TOPICS, dlq_topic=DLQ))])
orders_audit = Asset("orders_audit", uri=URI, watchers=[
    AssetWatcher("orders_audit", KafkaSharedStreamTrigger(topics=TOPICS, dlq_topic=DLQ))])

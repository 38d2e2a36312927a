"""Watcher module of the tracing end-to-end test: the topic's messages as events of
``orders``, the asset the test Airflow instance A declares (found there by name)."""

import os

from sharedstream import Asset, AssetWatcher, KafkaSharedStreamTrigger

orders = Asset("orders", uri="s3://bridge/orders", watchers=[AssetWatcher(
    "traced_orders", KafkaSharedStreamTrigger(topics=[os.environ["TRACED_TOPIC"]],
                                              kafka_config_id="e2e", poll_timeout=0.2))])

"""Watcher module of the tracing end-to-end test: the topic's messages as events of
``orders``, the asset the test Airflow instance A declares (found there by name). The
stock trigger filters a tombstone out and rejects a value that is not UTF-8, which goes
to the dead-letter topic."""

import os

from sharedstream import Asset, AssetWatcher, KafkaSharedStreamTrigger

orders = Asset("orders", uri="s3://bridge/orders", watchers=[AssetWatcher(
    "traced_orders", KafkaSharedStreamTrigger(topics=[os.environ["TRACED_TOPIC"]],
                                              dlq_topic=os.environ["TRACED_DLQ"],
                                              kafka_config_id="e2e", poll_timeout=0.2))])

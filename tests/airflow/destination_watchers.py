"""Watcher module of the airflow-destination tests: three assets fed by one topic.

``kafka_orders`` has the uri a Kafka user writes (``kafka://orders``), which Airflow's
Kafka provider refuses; its Airflow twin is found by name. ``paced_orders`` goes to a
paced destination; ``ghost`` has no asset in Airflow at all.
"""

import os

from sharedstream import Asset, AssetWatcher, KafkaSharedStreamTrigger

TOPIC = os.environ["DEST_TOPIC"]


def trigger() -> KafkaSharedStreamTrigger:
    return KafkaSharedStreamTrigger(topics=[TOPIC], kafka_config_id="e2e", poll_timeout=0.2)


kafka_orders = Asset("kafka_orders", uri="kafka://orders",
                     watchers=[AssetWatcher("kafka_orders", trigger())])
paced_orders = Asset("paced_orders", uri="s3://stack/paced",
                     watchers=[AssetWatcher("paced_orders", trigger())])
ghost = Asset("ghost", uri="s3://stack/ghost", watchers=[AssetWatcher("ghost", trigger())])

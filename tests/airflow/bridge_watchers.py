"""Watcher module of the bridge tests: one sink from the bridge topic into instance B.

Topic, DLQ topic and config path come from the environment the test sets.
"""

import os

from sharedstream import Asset, AssetWatcher
from sharedstream.airflowbridge.sink import AirflowAssetSinkTrigger

bridge = Asset("bridge_to_b", uri="airflow://b", watchers=[
    AssetWatcher(name="sink_b", trigger=AirflowAssetSinkTrigger(
        topics=[os.environ["BRIDGE_TOPIC"]], dlq_topic=os.environ["BRIDGE_DLQ"],
        targets=["b"], config_path=os.environ["SHAREDSTREAM_CONFIG"])),
])

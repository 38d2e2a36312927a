"""Start-up error: two watchers of one group disagree on the group's ``dlq_topic``."""

from sharedstream import Asset, AssetWatcher, KafkaSharedStreamTrigger

left = Asset("left", watchers=[AssetWatcher("left_watcher", KafkaSharedStreamTrigger(
    topics=["t"], kafka_config_id="e2e", dlq_topic="left.dlq"))])
right = Asset("right", watchers=[AssetWatcher("right_watcher", KafkaSharedStreamTrigger(
    topics=["t"], kafka_config_id="e2e", dlq_topic="right.dlq"))])

"""Start-up error: two assets declare a watcher with the same name."""

from sharedstream import Asset, AssetWatcher, KafkaSharedStreamTrigger

first = Asset("first", watchers=[
    AssetWatcher("same_name", KafkaSharedStreamTrigger(topics=["t"], kafka_config_id="e2e"))])
second = Asset("second", watchers=[
    AssetWatcher("same_name", KafkaSharedStreamTrigger(topics=["t"], kafka_config_id="e2e"))])

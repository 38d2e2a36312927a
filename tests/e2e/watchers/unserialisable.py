"""Start-up error: a trigger whose ``serialize()`` cannot rebuild it (a lost argument)."""

from typing import Any

from sharedstream import Asset, AssetWatcher, KafkaSharedStreamTrigger


class Forgetful(KafkaSharedStreamTrigger):
    def __init__(self, *, threshold: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.threshold = threshold  # never serialised: the rebuild fails


forgetful = Asset("forgetful", watchers=[
    AssetWatcher("forgetful", Forgetful(threshold=3, topics=["t"], kafka_config_id="e2e"))])

"""A watcher module whose ``blocker`` filter blocks the event loop, as a filter calling a
blocking library does (``time.sleep``, a synchronous HTTP client, a heavy parse).

On a message ``{"id": n, "block": true}`` the filter sleeps, without awaiting, for as
long as the file ``$E2E_BLOCK_FLAG`` exists: the test ends the block by removing it,
so the block lasts exactly until the test has seen what it checks. ``bystander`` keeps
every message (it is frozen too while the loop is blocked: one loop serves both).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from sharedstream import Asset, AssetWatcher, KafkaMessage, KafkaSharedStreamTrigger, TriggerEvent

TOPIC = os.environ["E2E_TOPIC"]
FLAG = Path(os.environ["E2E_BLOCK_FLAG"])
GIVE_UP_S = 120.0  # a test that never removes the flag does not leave the process frozen


class Blocker(KafkaSharedStreamTrigger):
    async def filter_shared_stream(self, stream: AsyncIterator[Any]
                                   ) -> AsyncIterator[TriggerEvent]:
        message: KafkaMessage
        async for message in stream:
            assert message.value is not None
            document = json.loads(message.value)
            if document.get("block"):
                deadline = time.monotonic() + GIVE_UP_S
                # The mistake under test, which ruff's ASYNC rules would catch: the loop
                # cannot run while this thread sleeps.
                while FLAG.exists() and time.monotonic() < deadline:  # noqa: ASYNC240
                    time.sleep(0.05)  # noqa: ASYNC251
            yield TriggerEvent(document)


def watcher(cls: type[KafkaSharedStreamTrigger]) -> KafkaSharedStreamTrigger:
    return cls(topics=[TOPIC], kafka_config_id="e2e", poll_timeout=0.2)


assets = [
    Asset("blocked", uri=f"kafka://127.0.0.1:9092/{TOPIC}",
          watchers=[AssetWatcher("blocker", watcher(Blocker))]),
    Asset("bystanding", uri=f"kafka://127.0.0.1:9092/{TOPIC}",
          watchers=[AssetWatcher("bystander", watcher(KafkaSharedStreamTrigger))]),
]

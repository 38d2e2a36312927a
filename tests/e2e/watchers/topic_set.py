"""One watcher, ``reader``, on the topics named by ``$E2E_TOPICS`` (comma-separated).

Changing ``$E2E_TOPICS`` between two runs is a watcher module whose topic set changed:
a new consumer group. Every message the watcher is handed is written down as
``topic partition offset`` (one unbuffered append per line) in ``<pid>.log`` under
``$E2E_HANDOUTS``, so a test counts hand-outs by identity, not events (an event's
unique key would hide a second hand-out).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from sharedstream import Asset, AssetWatcher, KafkaMessage, KafkaSharedStreamTrigger, TriggerEvent

TOPICS = os.environ["E2E_TOPICS"].split(",")
HANDOUTS = Path(os.environ["E2E_HANDOUTS"])


class Reader(KafkaSharedStreamTrigger):
    async def filter_shared_stream(self, stream: AsyncIterator[Any]
                                   ) -> AsyncIterator[TriggerEvent]:
        fd = os.open(HANDOUTS / f"{os.getpid()}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                     0o644)
        try:
            message: KafkaMessage
            async for message in stream:
                os.write(fd, f"{message.topic} {message.partition} {message.offset}\n".encode())
                yield TriggerEvent({"topic": message.topic, "offset": message.offset})
        finally:
            os.close(fd)


assets = [Asset("topic_set", uri=f"kafka://127.0.0.1:9092/{TOPICS[0]}", watchers=[
    AssetWatcher("reader", Reader(topics=TOPICS, kafka_config_id="e2e", poll_timeout=0.2))])]

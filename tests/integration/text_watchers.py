"""Watcher module of tests/integration/test_text_safety.py: text a database or a header
cannot take as it is, coming from messages and filters.

One group on ``$TEXT_TOPIC``, dead-lettered to ``$TEXT_DLQ`` when it is set (else rejections
become ``rejected_message`` rows). ``$TEXT_WATCHERS`` selects the watchers:

* ``framed`` is the filter of issue 25: it rejects Confluent-framed values (the schema
  registry's wire format starts with a 0x00 byte) with reason "framed", and yields every
  other value parsed as JSON.
* ``hostile`` reads an instruction from the value: ``reject:<bytes>`` rejects with the
  bytes decoded with ``surrogateescape`` as the reason (a NUL stays a NUL, an undecodable
  byte becomes a lone surrogate); ``reject-huge`` rejects with a 10 MB reason;
  ``payload:<bytes>`` yields an event whose payload holds the bytes decoded the same way;
  anything else yields ``{"offset": n}``.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from typing import Any

from sharedstream import (
    Asset,
    AssetWatcher,
    KafkaMessage,
    KafkaSharedStreamTrigger,
    TriggerEvent,
    reject_shared_stream_event,
)

TOPIC = os.environ["TEXT_TOPIC"]
DLQ = os.environ.get("TEXT_DLQ") or None
HUGE_REASON = "x" * 10_000_000


class Framed(KafkaSharedStreamTrigger):
    async def filter_shared_stream(self, stream: AsyncIterator[Any]
                                   ) -> AsyncIterator[TriggerEvent]:
        message: KafkaMessage
        async for message in stream:
            assert message.value is not None
            if message.value[:1] == b"\x00":
                reject_shared_stream_event("framed")
                continue
            yield TriggerEvent(json.loads(message.value))


class Hostile(KafkaSharedStreamTrigger):
    async def filter_shared_stream(self, stream: AsyncIterator[Any]
                                   ) -> AsyncIterator[TriggerEvent]:
        message: KafkaMessage
        async for message in stream:
            value = message.value or b""
            verb, _, rest = value.partition(b":")
            text = rest.decode("utf-8", "surrogateescape")
            if verb == b"reject":
                reject_shared_stream_event(text)
            elif verb == b"reject-huge":
                reject_shared_stream_event(HUGE_REASON)
            elif verb == b"payload":
                yield TriggerEvent({"text": text})
            else:
                yield TriggerEvent({"offset": message.offset})


CATALOGUE: dict[str, type[KafkaSharedStreamTrigger]] = {"framed": Framed, "hostile": Hostile}

assets = [
    Asset(name, uri=f"kafka://text/{TOPIC}", watchers=[AssetWatcher(name, CATALOGUE[name](
        topics=[TOPIC], kafka_config_id="text", poll_timeout=0.2, dlq_topic=DLQ))])
    for name in os.environ["TEXT_WATCHERS"].split(",")
]

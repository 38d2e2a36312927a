"""A producer driven like a tiny manager: the group member of the Kafka integration tests.

Importable (in-process members) and runnable as a script (a member in its own
process, so a test can SIGKILL it: no clean close, no final commit).

Script: ``python kafka_members.py BOOTSTRAP GROUP TOPIC FAIL_OFFSET`` prints one
JSON line per persisted event identity, then ``COMMITTED <n>`` after each commit.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from sharedstream.producer import AdvanceItem, AdvanceOutcome, ForgetLanes
from sharedstream.producer.kafka import KafkaSharedStreamProducer
from sharedstream.producer.payload import KafkaPayload
from sharedstream.producer.rejections import InMemoryRejectionRecorder

WATCHERS = frozenset({"w1", "w2"})
Decide = Callable[[KafkaPayload], AdvanceOutcome]


def conn(bootstrap: str, group: str, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
        **extra,
    }


def ack_all(_payload: KafkaPayload) -> AdvanceOutcome:
    return AdvanceOutcome(acked=WATCHERS)


async def drive(
    producer: KafkaSharedStreamProducer,
    decide: Decide,
    persisted: Callable[[tuple[str, int, int]], None],
    handed: list[KafkaPayload] | None = None,
    after_advance: Callable[[], Any] | None = None,
) -> None:
    """Hand every batch to ``decide``; "persist" acked messages' events, then advance per lane."""
    async for item in producer.open_stream():
        if isinstance(item, ForgetLanes):
            continue
        lanes: dict[Any, list[AdvanceItem[KafkaPayload]]] = {}
        for _raw, payload in item:
            if handed is not None:
                handed.append(payload)
            outcome = decide(payload)
            if outcome.acked and not outcome.failed:
                persisted(payload.identity)
            lanes.setdefault(payload.lane, []).append(AdvanceItem(payload, outcome))
        for batch in lanes.values():
            await producer.advance(batch)
        if after_advance is not None:
            await after_advance()


async def _main(bootstrap: str, group: str, topic: str, fail_offset: int) -> None:
    producer = KafkaSharedStreamProducer(
        topics=[topic], config=conn(bootstrap, group), recorder=InMemoryRejectionRecorder()
    )

    def decide(p: KafkaPayload) -> AdvanceOutcome:
        if p.offset == fail_offset:
            return AdvanceOutcome(
                acked=frozenset({"w1"}), failed=frozenset({"w2"}), retry_after=3600
            )
        return AdvanceOutcome(acked=WATCHERS)

    def persisted(identity: tuple[str, int, int]) -> None:
        print(json.dumps(list(identity)), flush=True)

    count = 0

    async def commit() -> None:
        nonlocal count
        await producer.commit()
        count += 1
        print(f"COMMITTED {count}", flush=True)

    await drive(producer, decide, persisted, after_advance=commit)


if __name__ == "__main__":
    asyncio.run(_main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))

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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ledger_driver import ACK, Driver, Outcome
from sharedstream.kafka.payload import KafkaPayload
from sharedstream.kafka.producer import KafkaSharedStreamProducer
from sharedstream.kafka.rejections import InMemoryRejectionRecorder

Decide = Callable[[KafkaPayload], Outcome]


def conn(bootstrap: str, group: str, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
        **extra,
    }


def ack_all(_payload: KafkaPayload) -> Outcome:
    return ACK


async def drive(
    producer: KafkaSharedStreamProducer,
    decide: Decide,
    persisted: Callable[[tuple[str, int, int]], None],
    handed: list[KafkaPayload] | None = None,
    after_batch: Callable[[], Any] | None = None,
) -> None:
    """Settle every record as ``decide`` says, through the real ledger, for as long as the
    producer reads; an identity is "persisted" when some watcher stored its event."""
    await Driver(producer).run(decide, persisted, handed, after_batch)


async def _main(bootstrap: str, group: str, topic: str, fail_offset: int) -> None:
    producer = KafkaSharedStreamProducer(
        topics=[topic], config=conn(bootstrap, group), recorder=InMemoryRejectionRecorder()
    )

    def decide(p: KafkaPayload) -> Outcome:
        if p.offset == fail_offset:
            return Outcome(failed=True, retry_after=3600)  # w1 persisted it, w2 failed
        return ACK

    def persisted(identity: tuple[str, int, int]) -> None:
        print(json.dumps(list(identity)), flush=True)

    count = 0

    async def commit() -> None:
        nonlocal count
        await producer.commit()
        count += 1
        print(f"COMMITTED {count}", flush=True)

    await drive(producer, decide, persisted, after_batch=commit)


if __name__ == "__main__":
    asyncio.run(_main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))

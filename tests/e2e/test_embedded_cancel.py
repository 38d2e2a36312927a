"""The embedded API on a real broker and PostgreSQL: a host service cancelled mid-stream.

A host asyncio service runs ``async with sharedstream.Triggerer(config, assets=...)``
beside its own work. Its watcher stops at a gate in the middle of the stream (a
message handed out, not finished) and the service's task is cancelled there. The
cancelled block must commit exactly what was persisted (per partition, the
committed offset is the number of events persisted), and a second embedded start
must finish the stream: every id once, and nothing the first run committed handed
out again.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from db_schemas import postgres_schema_url
from streams import committed, end_offsets, event_ids, events, produce

from sharedstream import (
    Asset,
    AssetWatcher,
    KafkaMessage,
    KafkaSharedStreamTrigger,
    TriggerEvent,
)
from sharedstream.triggerer import Config, DatabaseSettings, ProcessSettings, Triggerer

PARTITIONS = 3
COUNT = 900
GATE_AT = 400  # the hand-out at which the first run's watcher stops, mid-stream
WAIT_S = 60.0


class Gate:
    """What the watcher was handed, and where it waits (the test opens or keeps it)."""

    handed: Counter[tuple[int, int]] = Counter()
    closed = True
    reached: asyncio.Event | None = None
    wait_forever: asyncio.Event | None = None


class GatedKeep(KafkaSharedStreamTrigger):
    async def filter_shared_stream(self, stream: AsyncIterator[Any]
                                   ) -> AsyncIterator[TriggerEvent]:
        message: KafkaMessage
        async for message in stream:
            Gate.handed[(message.partition, message.offset)] += 1
            if Gate.closed and sum(Gate.handed.values()) == GATE_AT:
                assert Gate.reached is not None and Gate.wait_forever is not None
                Gate.reached.set()
                await Gate.wait_forever.wait()  # the host is cancelled while we wait here
            assert message.value is not None
            yield TriggerEvent({"id": json.loads(message.value)["id"]})


@pytest.fixture
def postgres_url(database_url: str) -> Iterator[str]:
    yield from postgres_schema_url(database_url)


def per_partition(found: list[Any]) -> dict[int, int]:
    counts = Counter(e.partition for e in found)
    return {p: counts.get(p, 0) for p in range(PARTITIONS)}


async def until_async(condition: Any, what: str) -> Any:
    """Poll a blocking ``condition`` in a thread until truthy, against WAIT_S."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while True:
        value = await asyncio.to_thread(condition)
        if value:
            return value
        assert loop.time() < deadline, f"timed out after {WAIT_S:.0f}s waiting for {what}"
        await asyncio.sleep(0.1)


async def test_a_cancelled_host_commits_what_was_persisted_and_a_restart_finishes(
        postgres_url: str, kafka_bootstrap: str, create_topic: Any,
        connection: dict[str, Any]) -> None:
    topic = create_topic("embedded", partitions=PARTITIONS)
    produce(kafka_bootstrap, topic, range(COUNT), PARTITIONS)
    group = f"{connection['group.id']}.{topic}"
    config = Config(database=DatabaseSettings(url=postgres_url),
                    process=ProcessSettings(health_port=-1, shutdown_timeout=30.0),
                    connections={"e2e": connection})

    def assets() -> list[Asset]:
        return [Asset("embedded", watchers=[AssetWatcher("gated", GatedKeep(
            topics=[topic], kafka_config_id="e2e"))])]

    ticks = 0

    async def service() -> None:
        """The host: its own periodic work beside the embedded triggerer."""
        nonlocal ticks
        async with Triggerer(config, assets=assets()):
            while True:
                ticks += 1
                await asyncio.sleep(0.05)

    Gate.handed.clear()
    Gate.reached, Gate.wait_forever = asyncio.Event(), asyncio.Event()
    host = asyncio.create_task(service())
    await asyncio.wait({host, asyncio.create_task(Gate.reached.wait())},
                       return_when=asyncio.FIRST_COMPLETED, timeout=120)
    assert Gate.reached.is_set(), f"the watcher never reached the gate: {host!r}"
    # What the watcher finished before the gate is persisted before the host is cancelled.
    await until_async(lambda: len(events(postgres_url)) == GATE_AT - 1,
                      f"{GATE_AT - 1} events persisted")
    host.cancel()
    with pytest.raises(asyncio.CancelledError):
        await host
    assert ticks > 0

    first = events(postgres_url)
    assert 0 < len(first) < COUNT
    assert event_ids(first, "gated") == dict.fromkeys({e.id for e in first}, 1)
    # Shutdown committed exactly the persisted prefix of every partition.
    at_cancel = {p: max(o, 0)  # -1: nothing committed yet
                 for p, o in committed(kafka_bootstrap, group, topic, PARTITIONS).items()}
    assert at_cancel == per_partition(first)

    first_handed = Counter(Gate.handed)
    Gate.handed.clear()
    Gate.closed = False
    try:
        ends = end_offsets(kafka_bootstrap, topic, PARTITIONS)
        async with Triggerer(config, assets=assets()) as triggerer:
            await until_async(
                lambda: committed(kafka_bootstrap, group, topic, PARTITIONS) == ends,
                f"committed offsets at the end of {topic} {ends}")
            triggerer.stop()
            assert await triggerer.wait() == 0
    finally:
        Gate.closed = True
    assert event_ids(events(postgres_url), "gated") == dict.fromkeys(range(COUNT), 1)
    again = {(p, o) for p, o in Gate.handed if o < at_cancel[p]}
    assert not again, f"committed before the cancel, handed out again: {sorted(again)[:5]}"
    assert sum(first_handed.values()) >= GATE_AT

"""The public testing harness as a watcher author uses it (issue 41, 3.10 and section 4).

A partition out of range is a ValueError naming the valid ones (was an IndexError from
the in-memory broker); what the harness recorded stays readable after its block (was
a SQLite error: the temporary database was gone); a batch watcher's hand-outs are in
``deliveries`` and ``attempts`` (were empty), and ``fail=`` reaches it too.
"""

from __future__ import annotations

import dataclasses

import pytest

from sharedstream import Asset, AssetWatcher, KafkaSharedStreamTrigger, TriggerEvent
from sharedstream.core.batch import MessageBatch
from sharedstream.testing import Event, WatcherHarness
from sharedstream.testing.harness import FAST

pytestmark = pytest.mark.unit


class Every(KafkaSharedStreamTrigger):
    """Per message: one event per message."""


class EveryBatch(KafkaSharedStreamTrigger):
    """Batch: one event per message, the watermark in state."""

    async def filter_shared_batch(self, batch: MessageBatch) -> None:
        for message in batch:
            await self.asset_state_store.aadvance("watermark", message.offset)
            batch.emit(message, TriggerEvent({"offset": message.offset}))


def assets(*, batch: bool = False, dlq: str | None = None) -> list[Asset]:
    cls = EveryBatch if batch else Every
    return [Asset("a", watchers=[AssetWatcher("w", cls(topics=["t"], dlq_topic=dlq))])]


async def test_a_partition_out_of_range_names_the_valid_ones() -> None:
    async with WatcherHarness(assets(), partitions=3) as harness:
        for partition in (3, -1, 10**9):
            with pytest.raises(ValueError, match=r"topic 't' has partitions 0 to 2"):
                harness.send("x", partition=partition)
        with pytest.raises(ValueError, match=r"topic 'other' is not watched \(watched: t\)"):
            harness.send("x", topic="other")
        assert harness.send("x", partition=2) == 0
        await harness.settle()
        assert [(e.partition, e.offset) for e in harness.events()] == [(2, 0)]


async def test_what_was_recorded_stays_readable_after_the_block() -> None:
    async with WatcherHarness(assets(batch=True), partitions=2) as harness:
        harness.send("one")
        harness.send("two", partition=1)
        await harness.settle()
        during = harness.events(), harness.state("a"), harness.committed()
    assert (harness.events(), harness.state("a"), harness.committed()) == during
    assert harness.events("w") == during[0] and harness.events("nobody") == []
    assert harness.events() == [Event("w", "a", {"offset": 0}, 0, 0),
                                Event("w", "a", {"offset": 0}, 1, 0)]
    assert harness.state("a") == {"watermark": 0}
    assert harness.state("b") == {}  # as while it runs: an asset without state
    with pytest.raises(RuntimeError, match="the harness is not running"):
        harness.store  # noqa: B018 (the property raises)


async def test_a_batch_watcher_has_its_hand_outs_and_its_injected_failures() -> None:
    async with WatcherHarness(assets(batch=True)) as harness:
        first = harness.send("a")
        failing = harness.send("b", fail=2)
        harness.send("c")
        await harness.settle()
        assert harness.attempts(first) == {"w": 1}
        assert harness.attempts(failing) == {"w": 3}
        assert [(d.failed, d.is_retry) for d in harness.deliveries if d.offset == failing] == [
            (True, False), (True, True), (False, True)]
        assert sorted(e.offset for e in harness.events()) == [0, 1, 2]


async def test_a_batch_watcher_failing_max_attempts_rejects_the_message() -> None:
    settings = dataclasses.replace(FAST, max_attempts=2)
    async with WatcherHarness(assets(batch=True, dlq="t.dlq"), settings=settings) as harness:
        harness.send("a")
        bad = harness.send("b", fail=5)
        await harness.settle()
        assert harness.attempts(bad) == {"w": 2}
        [dead] = harness.rejections()
        assert dead.offset == bad and dead.reasons["w"].startswith("max attempts: ")

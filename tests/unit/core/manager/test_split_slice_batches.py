"""A counted slice a batch watcher takes in two batches, the second needing entries.

The first batch says nothing (its watcher's ``progress`` moves); the second emits, rejects,
stages state, raises (and is split) or hangs past the ack timeout, which itemises the slice.
Every message must still settle and be committed: the first batch's entries, resolved by
everyone before the slice had entries, included (tests/unit/core/test_split_slice_itemised.py
has the group-side paths). The real ``BatchRunner`` on the manager's harness.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from manager_fakes import Harness, settle
from test_manager_batches import lane, start_batch

from sharedstream import MessageBatch
from sharedstream.core.window import current_window
from sharedstream.triggers.base import TriggerEvent

pytestmark = pytest.mark.unit

SecondBatch = Callable[[MessageBatch, Harness], Awaitable[None]]


async def emits(batch: MessageBatch, h: Harness) -> None:
    batch.emit(batch.messages[-1], TriggerEvent("event"))


async def rejects(batch: MessageBatch, h: Harness) -> None:
    batch.reject(batch.messages[-1], "bad")


async def stages(batch: MessageBatch, h: Harness) -> None:
    window = current_window()
    assert window is not None
    window.staged = {"last_seen": batch.messages[-1]}


async def raises_once(batch: MessageBatch, h: Harness) -> None:
    if len(batch) > 1:  # split down to p:3 alone, which then passes
        raise RuntimeError("boom")
    if batch.messages == ["p:3"] and not h.group.counters.failed:
        raise RuntimeError("boom")


async def hangs_once(batch: MessageBatch, h: Harness) -> None:
    if len(batch) > 1:  # the ack timeout fails both; each comes back alone
        await asyncio.Event().wait()


@pytest.mark.parametrize("second", [emits, rejects, stages, raises_once, hangs_once],
                         ids=["emit", "reject", "staged state", "raise and split",
                              "ack timeout"])
async def test_a_slice_split_across_batches_commits_whole(second: SecondBatch) -> None:
    async def handler(batch: MessageBatch) -> None:
        if batch.messages != ["p:0", "p:1"]:  # the first piece says nothing: progress only
            await second(batch, h)

    h = Harness(["a"], subscriber_queue_size=2, ack_timeout=30.0, retry_backoff_initial=1.0)
    h.sink.auto = True
    a = start_batch(h, "a", handler)
    await settle()
    h.producer.feed(*lane(4))
    await settle()
    h.clock.advance(30.0)  # the ack timeout, where a call hangs
    await settle()
    h.clock.advance(1.0)  # held messages come back alone
    await settle()
    h.clock.advance(1.0)
    await settle()
    assert a.calls[:2] == [["p:0", "p:1"], ["p:2", "p:3"]]
    assert h.publish() == {"p": 4}
    assert h.group.in_flight == 0 and h.group.counters.settled == 4
    assert h.group.ledger.partitions[("p", 0)].open_bytes == 0
    await h.stop()


async def test_a_batch_whose_partition_ends_during_the_call_submits_nothing_of_it() -> None:
    # The call emits for a message of a counted slice whose partition is revoked while the
    # call runs: the dropped slice kept no record, so a window for it would carry no
    # payload to key its events by (the sink failed it, and the watcher was handed the
    # message again and again). A late outcome of a dropped partition changes nothing.
    ended = asyncio.Event()

    async def handler(batch: MessageBatch) -> None:
        await ended.wait()
        batch.emit(batch.messages[-1], TriggerEvent("event"))

    h = Harness(["a"], subscriber_queue_size=2, retry_backoff_initial=1.0)
    h.sink.auto = True
    a = start_batch(h, "a", handler)
    await settle()
    h.producer.feed(*lane(2))
    await settle()
    h.producer.end("p")
    await settle()
    ended.set()
    await settle()
    h.clock.advance(1.0)  # a failed window would be retried by now
    await settle()
    assert a.calls == [["p:0", "p:1"]]
    assert h.sink.windows == [] and not h.group.counters.failed
    await h.stop()

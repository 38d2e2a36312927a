"""The hand-off's inbox wakes the loop only when it waits on an empty inbox (issue 27).

A wake is a ``call_soon_threadsafe``: a self-pipe write after which the consumer thread
waits for the GIL while the woken loop runs. Batches posted while the loop is busy are
taken by the loop itself when it asks for its next event, with no wake.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVarTuple

from sharedstream.core.backpressure import Backlog
from sharedstream.core.contract import PartitionsEnded, Records
from sharedstream.core.reads import PartitionRun, ReadBatch
from sharedstream.kafka.handoff import HandOff

Ts = TypeVarTuple("Ts")


class CountingLoop(asyncio.SelectorEventLoop):
    """Counts the calls made from other threads (the hand-off's wakes)."""

    wakes = 0

    def call_soon_threadsafe(self, callback: Callable[[*Ts], object], *args: *Ts,
                             context: contextvars.Context | None = None) -> asyncio.Handle:
        self.wakes += 1
        return super().call_soon_threadsafe(callback, *args, context=context)


def from_thread(fn: Callable[[], object]) -> None:
    """Run ``fn`` on another thread, as the consumer thread would, and wait for it."""
    thread = threading.Thread(target=fn)
    thread.start()
    thread.join()


def batch(*offsets: int) -> Records[int]:
    return Records([(offset, offset) for offset in offsets])


def run(main: Callable[[CountingLoop, HandOff[int]], Coroutine[Any, Any, None]]) -> None:
    """``main(loop, hand)`` on a counting loop the hand-off posts to."""
    loop = CountingLoop()
    hand: HandOff[int] = HandOff()
    hand.inbox.attach(loop)
    try:
        loop.run_until_complete(main(loop, hand))
    finally:
        loop.close()


def test_batches_posted_while_the_loop_is_busy_wake_nothing_and_keep_their_order() -> None:
    async def main(loop: CountingLoop, hand: HandOff[int]) -> None:

        def post() -> None:
            hand.inbox.post_batch(batch(1, 2), 10)
            hand.inbox.post(PartitionsEnded(frozenset({("t", 0)})))
            hand.inbox.post_batch(batch(3), 10)

        from_thread(post)
        assert hand.inbox.backlog == Backlog(3, 20)  # messages, not batches
        taken = [await hand.inbox.next_event() for _ in range(3)]
        assert taken == [batch(1, 2), PartitionsEnded(frozenset({("t", 0)})), batch(3)]
        assert loop.wakes == 0
        assert hand.inbox.backlog == Backlog(0, 0)
        assert hand.counters().messages_consumed == 3

    run(main)


def test_a_waiting_loop_is_woken_once_by_the_next_post() -> None:
    async def main(loop: CountingLoop, hand: HandOff[int]) -> None:
        waiting = asyncio.create_task(hand.inbox.next_event())
        await asyncio.sleep(0)  # the task runs until it waits on the empty outbox
        assert not waiting.done()

        def post() -> None:
            hand.inbox.post_batch(batch(1), 10)
            hand.inbox.post_batch(batch(2), 10)

        from_thread(post)
        taken = await waiting  # both were there when the woken loop looked: one batch
        assert isinstance(taken, Records) and list(taken.items) == [(1, 1), (2, 2)]
        assert hand.inbox.backlog.messages == 0
        assert loop.wakes == 1

    run(main)


def test_batches_waiting_in_a_row_are_taken_as_one_in_read_order() -> None:
    """A routed watcher is called once for what it was routed from all of them; the
    parts keep their order, so each partition's records keep theirs."""
    async def main(loop: CountingLoop, hand: HandOff[int]) -> None:
        run_a, run_b = PartitionRun(("t", 0), 1), PartitionRun(("t", 0), 1)
        run_a.reads, run_b.reads = [10, 11], [12]

        def post() -> None:
            hand.inbox.post_batch(Records(ReadBatch([run_a, (5, 5)], 3)), 30)
            hand.inbox.post_batch(Records(ReadBatch([run_b], 1)), 10)
            hand.inbox.post_batch(batch(6), 10)
            hand.inbox.post(PartitionsEnded(frozenset({("t", 0)})))
            hand.inbox.post_batch(batch(7), 10)

        from_thread(post)
        assert hand.inbox.backlog == Backlog(6, 60)  # messages: 3 + 1 + 1 + 1
        joined = await hand.inbox.next_event()
        assert isinstance(joined, Records) and isinstance(joined.items, ReadBatch)
        assert joined.items.parts == [run_a, (5, 5), run_b, (6, 6)]
        assert list(joined.items) == [(10, 10), (11, 11), (5, 5), (12, 12), (6, 6)]
        assert hand.inbox.backlog == Backlog(1, 10)  # the batch after the partition event waits
        assert await hand.inbox.next_event() == PartitionsEnded(frozenset({("t", 0)}))
        assert await hand.inbox.next_event() == batch(7)
        assert hand.counters().messages_consumed == 6

    run(main)


def test_a_failure_ends_a_waiting_loop() -> None:
    async def main(loop: CountingLoop, hand: HandOff[int]) -> None:
        waiting = asyncio.create_task(hand.inbox.next_event())
        await asyncio.sleep(0)
        from_thread(lambda: hand.fail(RuntimeError("broker gone")))
        assert await waiting is None
        assert isinstance(hand.failure, RuntimeError)

    run(main)


def test_a_cancelled_wait_leaves_the_next_one_working() -> None:
    async def main(loop: CountingLoop, hand: HandOff[int]) -> None:
        waiting = asyncio.create_task(hand.inbox.next_event())
        await asyncio.sleep(0)
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        from_thread(lambda: hand.inbox.post_batch(batch(7), 10))
        assert await hand.inbox.next_event() == batch(7)

    run(main)

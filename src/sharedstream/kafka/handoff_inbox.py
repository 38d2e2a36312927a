"""The hand-off's inbox: what the consumer thread read and saw, for the event loop.

Named from the loop's side (it is the loop's inbox): records in batches, and what
happened to the partitions (started, ended, rewound), in the order the thread saw them,
then ``None`` once the consumer failed.

Thread-safety:

* Writers: the consumer thread (:meth:`Inbox.post`, :meth:`Inbox.post_batch`); any
  thread for :meth:`Inbox.end` (a failure). Reader: the event loop alone
  (:meth:`Inbox.next_event`), and the thread's backpressure (:attr:`Inbox.backlog`,
  in messages and bytes).
* ``_lock`` guards the queue, the waiter, the backlog and the consumed count; each
  post or take holds it once per batch, never per message, and never while waking the
  loop or waiting.
* The thread wakes the loop (``call_soon_threadsafe``: a self-pipe write, after which
  the thread waits for the GIL while the woken loop runs) only when the loop waits on
  an empty inbox; a loop still busy with earlier batches takes the next ones itself
  when it asks for its next event. So on a backlog the thread appends and reads on.
* A thread dying between two posts leaves what it posted in order; the failure it
  dies with (HandOff.fail) appends ``None`` after them, so the loop takes every batch
  read before it learns of the failure. A loop that stops taking leaves the backlog at
  its bound: the thread holds back (core/backpressure.py) and serves callbacks.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

from sharedstream.core.backpressure import Backlog
from sharedstream.core.contract import Records, StreamEvent
from sharedstream.core.reads import ReadBatch

PayloadT = TypeVar("PayloadT")


class Inbox(Generic[PayloadT]):
    """Consumer thread -> event loop (see module docstring)."""

    def __init__(self, room: threading.Event) -> None:
        self._lock = threading.Lock()
        self._room = room  # set when the loop takes a batch: a holding thread reads on
        self._loop: asyncio.AbstractEventLoop | None = None
        self._events: deque[StreamEvent[PayloadT] | None] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._backlog = 0
        self._backlog_bytes = 0
        self._sizes: deque[int] = deque()  # the bytes of each batch queued, in order
        self._consumed = 0

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Loop, before the thread starts: whom a post wakes."""
        self._loop = loop

    def post(self, event: StreamEvent[PayloadT]) -> None:
        """Thread: one event for the loop, in order."""
        self._append(event)

    def end(self) -> None:
        """Any thread, once the consumer failed: after what was posted, the loop's
        stream ends (:meth:`next_event` returns None)."""
        self._append(None)

    def post_batch(self, batch: Records[PayloadT], size: int) -> None:
        """Thread: a batch read, its keys and values ``size`` bytes; its messages and
        bytes count in the backlog until the loop takes them."""
        with self._lock:
            self._backlog += len(batch.items)
            self._backlog_bytes += size
            self._sizes.append(size)
            self._events.append(batch)
            waiter, self._waiter = self._waiter, None
        self._wake(waiter)

    def _append(self, event: StreamEvent[PayloadT] | None) -> None:
        with self._lock:
            self._events.append(event)
            waiter, self._waiter = self._waiter, None
        self._wake(waiter)

    def _wake(self, waiter: asyncio.Future[None] | None) -> None:
        """Wake the loop if it waits on an empty inbox (else it finds the event itself
        when it next asks)."""
        loop = self._loop
        if waiter is not None and loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(_set, waiter)

    async def next_event(self) -> StreamEvent[PayloadT] | None:
        """Loop: the next event; None once the consumer failed.

        A batch's messages count in the backlog until the loop takes them. Batches read
        while the loop was busy, waiting in a row, are taken together as one
        (:meth:`ReadBatch.joined`): a routed watcher is then called once for what it was
        routed from all of them, not once per batch (with 1,000 watchers each wanting
        1/1,000, a call per message became a call per eight). So the backlog's bound is
        also the largest hand-out: a bound in messages, the group's ``max_in_flight``,
        lets 10,000 watchers each wanting 1/10,000 take a message or more per call. It
        adds no wait and reorders nothing within a partition; a partition event ends the
        run, so it is still seen between the records read before and after it. Only an
        empty inbox makes the loop wait, and only then does the thread's next post wake
        it.
        """
        while True:
            with self._lock:
                events = self._events
                if events:
                    event = events.popleft()
                    batch = event if isinstance(event, Records) else None
                    if batch is not None:
                        taken = [batch]
                        sizes = self._sizes
                        size = sizes.popleft()
                        while events:
                            more = events[0]
                            if not isinstance(more, Records):
                                break
                            events.popleft()
                            taken.append(more)
                            size += sizes.popleft()
                        if len(taken) > 1:
                            event = batch = Records(ReadBatch.joined(
                                [records.items for records in taken]))
                        n = len(batch.items)
                        self._backlog -= n
                        self._backlog_bytes -= size
                        self._consumed += n
                    break
                waiter = self._waiter = asyncio.get_running_loop().create_future()
            await waiter
        if batch is not None:
            self._room.set()
        return event

    @property
    def backlog(self) -> Backlog:
        """Messages (and their bytes) posted and not taken by the loop yet."""
        with self._lock:
            return Backlog(self._backlog, self._backlog_bytes)

    @property
    def consumed(self) -> int:
        """Messages the loop has taken (the ``messages_consumed`` counter)."""
        with self._lock:
            return self._consumed

    def call_on_loop(self, fn: Callable[[threading.Event], None], timeout: float) -> bool:
        """Thread: run ``fn(done)`` on the loop and wait until it sets ``done`` (at most
        ``timeout``). False when the loop did not answer in time; True at once when no
        loop runs (nothing there to wait for)."""
        loop = self._loop
        if loop is None or loop.is_closed() or not loop.is_running():
            return True
        done = threading.Event()
        loop.call_soon_threadsafe(fn, done)
        return done.wait(timeout)


def _set(waiter: asyncio.Future[None]) -> None:
    """Loop: the thread posted to an empty inbox (a cancelled wait needs nothing)."""
    if not waiter.done():
        waiter.set_result(None)

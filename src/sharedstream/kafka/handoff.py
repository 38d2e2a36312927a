"""The hand-off: the only object both of the adapter's threads touch.

The event loop (the adapter, the group, the ledger) and the consumer thread (the
``Consumer``, its callbacks) share nothing else. Everything that crosses is here,
under one lock, touched once per batch or commit tick, never per message:

* **inbox**, loop -> thread: the commit targets the ledger published, per-partition
  fetch requests (pause at a bound, or seek and resume), the group's pause, a request
  to look at the topic ids now;
* **outbox**, thread -> loop: what was read and what happened to the partitions, in
  order, and how many batches the loop has not taken yet. The thread wakes the loop
  (``call_soon_threadsafe``: a self-pipe write, after which the thread waits for the
  GIL while the woken loop runs) only when the loop waits on an empty outbox; a loop
  still busy with earlier batches takes the next ones itself, under the lock, when it
  asks for its next event. So on a backlog the thread appends and goes on reading.
* **what health, ``/status`` and ``/metrics`` read** from a third thread: the consumer
  state, readiness, the last error, the failure, the counters, the broker's partition
  figures, why each paused partition is paused, and since when no partition is owned.

Consumer states and the transitions allowed (any other raises :class:`InvalidState`)::

    STARTING -> RUNNING | CLOSING | FAILED        (subscribed; closed before; failed)
    RUNNING  -> PAUSED | REVOKING | CLOSING | FAILED
    PAUSED   -> RUNNING | REVOKING | CLOSING | FAILED
    REVOKING -> RUNNING | PAUSED | CLOSING | FAILED  (back where it came from; closed)
    CLOSING  -> CLOSED | FAILED                   (final commit, leave the group)
    FAILED   -> CLOSED                            (the adapter was closed after)
    CLOSED   -> (none)

A revocation during ``close()`` (librdkafka revokes the assignment then) stays CLOSING;
closing asked during a revocation ends the loop once the callback returns.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import enum
import queue
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, Generic, TypeVar

from sharedstream.core.backpressure import PauseReason
from sharedstream.core.contract import PartitionStats, Records, StreamEvent
from sharedstream.core.counters import AdapterCounters
from sharedstream.core.ledger import Key, Target
from sharedstream.core.lifecycle import InvalidState

PayloadT = TypeVar("PayloadT")


class ConsumerState(enum.Enum):
    STARTING = "starting"
    RUNNING = "running"
    PAUSED = "paused"
    REVOKING = "revoking"
    CLOSING = "closing"
    FAILED = "failed"
    CLOSED = "closed"


S = ConsumerState
TRANSITIONS: dict[ConsumerState, frozenset[ConsumerState]] = {
    S.STARTING: frozenset({S.RUNNING, S.CLOSING, S.FAILED}),
    S.RUNNING: frozenset({S.PAUSED, S.REVOKING, S.CLOSING, S.FAILED}),
    S.PAUSED: frozenset({S.RUNNING, S.REVOKING, S.CLOSING, S.FAILED}),
    S.REVOKING: frozenset({S.RUNNING, S.PAUSED, S.CLOSING, S.FAILED}),
    S.CLOSING: frozenset({S.CLOSED, S.FAILED}),
    S.FAILED: frozenset({S.CLOSED}),
    S.CLOSED: frozenset(),
}
# The consumer loop runs while the state is one of these.
LIVE = frozenset({S.STARTING, S.RUNNING, S.PAUSED, S.REVOKING})


class StreamNotOpenError(RuntimeError):
    """A broker operation was asked for while no consumer is open."""


# A fetch request: (generation, None = pause or the offset to seek to, why it pauses).
FetchRequest = tuple[int, int | None, PauseReason | None]


class HandOff(Generic[PayloadT]):
    """Inbox, outbox, lock and consumer state (see module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state = S.STARTING
        self._before_revoke = S.RUNNING
        self._loop: asyncio.AbstractEventLoop | None = None
        # inbox
        self._published: dict[Key, Target] = {}
        self._fetches: dict[Key, FetchRequest] = {}
        self._group_paused = False
        self._check_ids = False
        self._commands: queue.SimpleQueue[
            tuple[Callable[[Any], Any], concurrent.futures.Future[Any]]] = queue.SimpleQueue()
        # Set when the loop took a batch or the group resumed: a holding thread waits on
        # it instead of pausing the partitions.
        self.room = threading.Event()
        # outbox: events the loop has not taken; the future it waits on while it is empty
        self._outbox: deque[StreamEvent[PayloadT] | None] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._queued = 0
        # read from any thread
        self._ready = False
        self._last_error: str | None = None
        self._failure: BaseException | None = None
        self._counters = AdapterCounters()
        self._stats: Mapping[Key, PartitionStats] = {}
        self._paused: Mapping[Key, PauseReason] = {}
        self._holding = False
        # Since when (time.monotonic()) the consumer owns no partition; None: it owns some.
        self.waiting_since: float | None = None

    # -- lifecycle ---------------------------------------------------------------------

    @property
    def state(self) -> ConsumerState:
        return self._state

    def to(self, new: ConsumerState) -> None:
        with self._lock:
            self._to(new)

    def _to(self, new: ConsumerState) -> None:
        if new is self._state:
            return
        if new not in TRANSITIONS[self._state]:
            raise InvalidState(f"consumer state {self._state.value} -> {new.value}")
        self._state = new

    def started(self) -> None:
        """Thread: subscribed (unless closing was asked meanwhile)."""
        with self._lock:
            if self._state is S.STARTING:
                self._to(S.RUNNING)
                self._ready = True

    def closed(self) -> None:
        """The consumer left the group (thread), or the adapter closed after a failure."""
        with self._lock:
            if self._state in (S.CLOSING, S.FAILED):
                self._to(S.CLOSED)

    def revoking(self) -> None:
        """Thread: a revocation starts (kept CLOSING during close())."""
        with self._lock:
            if self._state in (S.RUNNING, S.PAUSED):
                self._before_revoke = self._state
                self._to(S.REVOKING)

    def revoked(self) -> None:
        with self._lock:
            if self._state is S.REVOKING:
                self._to(self._before_revoke)

    def paused(self, paused: bool) -> None:
        """Thread: the assignment was paused or resumed at the broker."""
        with self._lock:
            if self._state in (S.RUNNING, S.PAUSED):
                self._to(S.PAUSED if paused else S.RUNNING)
            elif self._state is S.REVOKING:
                self._before_revoke = S.PAUSED if paused else S.RUNNING

    @property
    def live(self) -> bool:
        return self._state in LIVE

    def close(self) -> bool:
        """Loop: ask the thread to close; False when closing was asked already."""
        with self._lock:
            if self._state in (S.CLOSING, S.CLOSED):
                return False
            if self._state is not S.FAILED:
                self._to(S.CLOSING)
        self.room.set()
        return True

    def fail(self, exc: BaseException) -> bool:
        """Any thread: the consumer failed for good; the loop's stream raises. False when
        it had failed already, or was closed."""
        with self._lock:
            if self._failure is not None or self._state is S.CLOSED:
                return False
            self._failure = exc
            self._to(S.FAILED)
            self._ready = False
        self.room.set()
        self._post(None)
        return True

    @property
    def failure(self) -> BaseException | None:
        return self._failure

    # -- inbox: loop -> thread ---------------------------------------------------------

    def publish(self, targets: Mapping[Key, Target]) -> None:
        with self._lock:
            self._published.update(targets)

    def take_published(self) -> dict[Key, Target]:
        # Peeked without the lock: a target published just after is taken next turn.
        if not self._published:
            return {}
        with self._lock:
            fresh, self._published = self._published, {}
        return fresh

    def request_fetch(self, key: Key, request: FetchRequest) -> None:
        with self._lock:
            self._fetches[key] = request

    def take_fetches(self) -> dict[Key, FetchRequest]:
        if not self._fetches:
            return {}
        with self._lock:
            requests, self._fetches = self._fetches, {}
        return requests

    def retry_fetch(self, key: Key, request: FetchRequest) -> None:
        """Thread: a request that could not be applied yet goes again next turn (unless
        the loop asked something newer meanwhile)."""
        with self._lock:
            self._fetches.setdefault(key, request)

    def pause_group(self, paused: bool) -> None:
        with self._lock:
            self._group_paused = paused
        if not paused:
            self.room.set()

    def check_ids_now(self) -> None:
        with self._lock:
            self._check_ids = True

    def take_id_check(self) -> bool:
        if not self._check_ids:
            return False
        with self._lock:
            asked, self._check_ids = self._check_ids, False
        return asked

    # -- outbox: thread -> loop --------------------------------------------------------

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Loop, before the thread starts: where the outbox posts."""
        self._loop = loop

    def post(self, event: StreamEvent[PayloadT]) -> None:
        """Thread: one event for the loop, in order."""
        self._post(event)

    def post_batch(self, batch: Records[PayloadT]) -> None:
        """Thread: a batch read (readiness: the broker answers); one lock for both."""
        with self._lock:
            self._queued += 1
            self._ready = self._failure is None
            self._outbox.append(batch)
            waiter, self._waiter = self._waiter, None
        self._wake_loop(waiter)

    def _post(self, event: StreamEvent[PayloadT] | None) -> None:
        with self._lock:
            self._outbox.append(event)
            waiter, self._waiter = self._waiter, None
        self._wake_loop(waiter)

    def _wake_loop(self, waiter: asyncio.Future[None] | None) -> None:
        """Thread: wake the loop if it waits on an empty outbox (else it finds the event
        itself when it next asks)."""
        loop = self._loop
        if waiter is not None and loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(_wake, waiter)

    async def next_event(self) -> StreamEvent[PayloadT] | None:
        """Loop: the next event; None once the consumer failed.

        Events are taken one at a time (a batch counts as queued until the loop takes
        it: the backpressure bound stays in batches). Only an empty outbox makes the loop
        wait, and only then does the thread's next post wake it.
        """
        while True:
            with self._lock:
                if self._outbox:
                    event = self._outbox.popleft()
                    batch = event if isinstance(event, Records) else None
                    if batch is not None:
                        self._queued -= 1
                        self._counters.messages_consumed += len(batch.items)
                    break
                waiter = self._waiter = asyncio.get_running_loop().create_future()
            await waiter
        if batch is not None:
            self.room.set()
        return event

    def pressure(self) -> tuple[bool, int]:
        """Thread: (the group paused, batches the loop has not taken)."""
        with self._lock:
            return self._group_paused, self._queued

    def call_on_loop(self, fn: Callable[[threading.Event], None], timeout: float) -> bool:
        """Thread: run ``fn(done)`` on the loop and wait until it sets ``done`` (at most
        ``timeout``). False when the loop is gone or did not answer in time."""
        loop = self._loop
        if loop is None or loop.is_closed() or not loop.is_running():
            return True
        done = threading.Event()
        loop.call_soon_threadsafe(fn, done)
        return done.wait(timeout)

    # -- commands: loop -> thread, for tests only (the adapter's commit()) -------------

    def command(self, fn: Callable[[Any], Any]) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._commands.put((fn, future))
        return future

    def run_commands(self, consumer: Any) -> None:
        """Thread: run the commands queued when the turn started; later ones wait for the
        next turn, so a caller reacting to one result cannot starve ``consume()``."""
        for _ in range(self._commands.qsize()):
            try:
                fn, future = self._commands.get_nowait()
            except queue.Empty:
                return
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(consumer))
            except BaseException as exc:
                future.set_exception(exc)

    def fail_commands(self, error: Exception) -> None:
        while True:
            try:
                _, future = self._commands.get_nowait()
            except queue.Empty:
                return
            if future.set_running_or_notify_cancel():
                future.set_exception(error)

    # -- read by health, /status and /metrics ------------------------------------------

    def mark_ready(self) -> None:
        with self._lock:
            self._ready = self._failure is None

    @property
    def ready(self) -> bool:
        """Thread: whether to probe the broker (a stale read costs one probe turn)."""
        return self._ready

    def readiness(self) -> tuple[bool, str | None, BaseException | None]:
        """(ready, the last error, the failure), read together."""
        with self._lock:
            return self._ready, self._last_error, self._failure

    def note_error(self, text: str) -> None:
        """A transient broker problem: not ready until the broker answers again."""
        with self._lock:
            self._last_error = text
            self._ready = False

    def count(self, add: Callable[[AdapterCounters, int], None], n: int = 1) -> None:
        """Bump a counter: ``add(counters, n)`` runs under the lock (one addition)."""
        with self._lock:
            add(self._counters, n)

    def counters(self) -> AdapterCounters:
        with self._lock:
            return replace(self._counters)

    def set_stats(self, stats: Mapping[Key, PartitionStats]) -> None:
        with self._lock:
            self._stats = stats

    def stats(self) -> Mapping[Key, PartitionStats]:
        with self._lock:
            return self._stats

    def set_waiting(self, since: float | None) -> None:
        """Thread: the consumer owns no partition since ``since`` (None: it owns some).
        One attribute, written whole: readers need no lock."""
        self.waiting_since = since

    def set_paused(self, paused: Mapping[Key, PauseReason], holding: bool) -> None:
        """Thread: which partitions do not fetch, and whether the group's fetching is
        held back (paused or not)."""
        with self._lock:
            self._paused, self._holding = paused, holding

    def paused_partitions(self) -> tuple[Mapping[Key, PauseReason], bool]:
        with self._lock:
            return self._paused, self._holding


def _wake(waiter: asyncio.Future[None]) -> None:
    """Loop: the thread posted to an empty outbox (a cancelled wait needs nothing)."""
    if not waiter.done():
        waiter.set_result(None)

"""One shared-stream group: a producer, a fixed cohort, lanes and holds.

Flow: the pump task pulls batches from ``producer.open_stream()`` and appends each
message to its lane's deque and to every target watcher's queue. Watchers resolve
it (ack / reject / fail) through their streams; when a lane's head is resolved, a
per-lane advance task hands the lane's contiguous resolved prefix to
``producer.advance`` (one call in flight per lane; what resolves meanwhile goes
into the next batch, so a busy lane sends big batches and a trickle sends singles).

Holds: a message some watcher failed is still advanced (with those watchers in
``failed`` and ``retry_after`` = the backoff for its delivery round); the producer
holds its floor and reads it again later. The entry stays here, keyed by identity,
so the re-read copy goes only to the watchers that have not acked or rejected it.
Held entries count towards ``max_in_flight``: an absent watcher lets its siblings
run ahead by at most that many messages.

Failure windows: if the process dies, nothing beyond what ``advance`` was given is
committed, so everything else is read again; state kept here (acks of earlier
rounds, attempt counts) is lost with the process, and a re-read goes to everyone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Hashable, Sequence
from typing import TYPE_CHECKING, Any

from sharedstream.producer.contract import (
    AdvanceItem,
    AdvanceOutcome,
    ForgetLanes,
    SharedStreamProducer,
)
from sharedstream.triggerer.counters import GroupCounters
from sharedstream.triggerer.entries import (
    ABSENT,
    ADVANCING,
    DROPPED,
    HELD,
    IN_FLIGHT,
    QUEUE_FULL,
    Entry,
    Lane,
)
from sharedstream.triggerer.stream import SharedStream
from sharedstream.triggerer.streamconfig import Clock, LoopClock, ManagerSettings, TimerHandle
from sharedstream.triggerer.window import Window, WorkSink

if TYPE_CHECKING:
    from sharedstream.triggerer.manager import SharedStreamManager
    from sharedstream.triggers.base import BaseEventTrigger

log = logging.getLogger(__name__)

NOT_IN_COHORT = "not in the cohort"


class ProducerStreamEnded(RuntimeError):
    """``open_stream()`` returned: a producer must stream for the group's whole life."""


class Group:
    """Runtime state of one ``shared_stream_key``. Internal to the manager."""

    def __init__(self, manager: SharedStreamManager, key: Hashable, cohort: frozenset[str],
                 producer: SharedStreamProducer[Any],
                 founder: tuple[str, BaseEventTrigger]) -> None:
        self.manager = manager
        self.key = key
        self.cohort = cohort
        self.producer = producer
        # The first subscriber: later ones must agree with its shared_stream_arguments().
        self.founder = founder
        self.settings: ManagerSettings = manager.settings
        # A paused group resumes once every queue is at or below this mark.
        self.low_queue = self.settings.subscriber_queue_size // 2
        self.clock: Clock = manager.clock
        self.sink: WorkSink = manager.sink
        self.streams: dict[str, SharedStream] = {}
        self.known: dict[Hashable, Entry] = {}
        self.lanes: dict[Hashable, Lane] = {}
        self.paused = False
        self.quiesced = False
        self.polling = False
        self.stopping = False
        self.failure: BaseException | None = None
        self._present: list[SharedStream] = []
        self._absent: dict[str, str] | None = dict.fromkeys(cohort, ABSENT)
        self._clean = AdvanceOutcome(acked=cohort)
        self.counters = GroupCounters()
        self._to_submit: list[Window] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._advancers: set[asyncio.Task[None]] = set()
        self._pump: asyncio.Task[None] | None = None
        self._grace: TimerHandle | None = self.clock.call_at(
            self.clock.now() + self.settings.cohort_grace_period, self._grace_expired)
        self._closed_producer: asyncio.Task[None] | None = None
        producer.bound_lanes(self.settings.max_in_flight, self.settings.max_in_flight_bytes)

    # -- membership ----------------------------------------------------------------

    def add(self, name: str) -> SharedStream:
        # The loop's own clock skips two calls per message on the hot path.
        now = (asyncio.get_running_loop().time if isinstance(self.clock, LoopClock)
               else self.clock.now)
        stream = SharedStream(self, name, now)
        self.streams[name] = stream
        self._membership_changed()
        if not self.polling and len(self.streams) == len(self.cohort):
            self._start_polling()
        return stream

    def remove(self, name: str, fail_pending: bool) -> None:
        stream = self.streams.pop(name)
        self._membership_changed()
        stream._detach(fail_pending)

    def _membership_changed(self) -> None:
        self._present = list(self.streams.values())
        absent = self.cohort - self.streams.keys()
        self._absent = dict.fromkeys(absent, ABSENT) if absent else None

    def _grace_expired(self) -> None:
        self._grace = None
        if not self.polling and not self.stopping and self.failure is None:
            log.warning("group %r: starting without %s after the grace period (held for them)",
                        self.key, sorted(self.cohort - self.streams.keys()))
            self._start_polling()

    def _start_polling(self) -> None:
        self.polling = True
        if self._grace is not None:
            self._grace.cancel()
            self._grace = None
        self._pump = self._spawn(self._run_pump())

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- intake ----------------------------------------------------------------------

    async def _run_pump(self) -> None:
        try:
            async for item in self.producer.open_stream():
                if isinstance(item, ForgetLanes):
                    self._forget(item.lanes)
                elif item:
                    self._broadcast(item)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._fail_group(exc)
            return
        self._fail_group(ProducerStreamEnded(f"open_stream() of group {self.key!r} returned"))

    def _broadcast(self, batch: Sequence[tuple[Any, Any]]) -> None:
        producer = self.producer
        identity = producer.message_identity
        lane_of = producer.get_advance_lane
        targets_of = producer.targets
        known = self.known
        lanes = self.lanes
        cohort = self.cohort
        absent = self._absent
        present, overflow = self._room()
        if overflow is not None:
            absent = {**(absent or {}), **overflow}
        n_present = len(present)
        self.counters.received += len(batch)
        for raw, payload in batch:
            ident = identity(payload)
            entry = known.get(ident)
            if entry is not None:
                if entry.state != HELD:
                    continue  # a re-read copy of a message still in flight
                self._redeliver(entry, raw, payload)
                continue
            key = lane_of(payload)
            lane = lanes.get(key)
            if lane is None:
                lane = lanes[key] = Lane(key)
            targets = targets_of(payload)
            entry = Entry(ident, lane, raw, payload, cohort if targets is None else targets)
            lane.queue.append(entry)
            known[ident] = entry
            if targets is None:
                for stream in present:
                    stream._queue.append(entry)
                entry.pending = n_present
                if absent is not None:
                    entry.failed = dict(absent)
                if not n_present:
                    self._resolved(entry)
            else:
                self._deliver(entry, targets)
        for stream in present:
            if stream._waiter is not None:
                stream._wake()
        self._check_pause()

    def _room(self) -> tuple[list[SharedStream], dict[str, str] | None]:
        """The streams that take this batch, and the watchers failed for it (queue full).

        A watcher whose queue is full *and* a whole queue behind its fastest sibling is
        lagging: it is failed for the new messages (held for it, no attempt used) so its
        siblings keep their pace; the in-flight bound still caps how far they run ahead.
        Measuring against the fastest sibling, not just the bound, keeps watchers of equal
        speed from failing each other: under load their queues sit near the bound and
        differ by scheduling jitter (a stream yields the loop every ``HANDOUT_RUN``
        messages), which must not turn into holds and redeliveries. When every queue is
        full the whole group is simply slow: the batch goes in (bounds are soft) and
        fetching pauses.
        """
        present = self._present
        if len(present) < 2:
            return present, None
        lengths = [len(s._queue) for s in present]
        bound = self.settings.subscriber_queue_size + min(lengths)
        if max(lengths) < bound:
            return present, None
        return ([s for s, n in zip(present, lengths, strict=True) if n < bound],
                {s.name: QUEUE_FULL for s, n in zip(present, lengths, strict=True) if n >= bound})

    def _deliver(self, entry: Entry, targets: frozenset[str]) -> None:
        """Slow path: a targeted message or a redelivery round."""
        entry.round_targets = targets
        entry.failed = None
        pending = 0
        for name in targets:
            stream = self.streams.get(name)
            if stream is not None:
                stream._queue.append(entry)
                pending += 1
            elif name in self.cohort:
                if entry.failed is None:
                    entry.failed = {}
                entry.failed[name] = ABSENT
            else:
                # A replayed dead letter naming a watcher that no longer exists goes
                # back to the dead-letter topic rather than vanishing.
                if entry.rejected is None:
                    entry.rejected = {}
                entry.rejected[name] = NOT_IN_COHORT
        entry.pending = pending
        if not pending:
            self._resolved(entry)

    def _redeliver(self, entry: Entry, raw: Any, payload: Any) -> None:
        entry.raw = raw
        entry.payload = payload
        entry.state = IN_FLIGHT
        entry.rounds += 1
        self.counters.redelivered += 1
        owed = entry.targets - (entry.acked_before or frozenset())
        if entry.rejected:
            owed = owed - entry.rejected.keys()
        entry.lane.queue.append(entry)
        self._deliver(entry, owed)

    def _forget(self, keys: frozenset[Hashable]) -> None:
        """The producer lost these lanes: drop their in-flight and held messages."""
        for key in keys:
            lane = self.lanes.pop(key, None)
            if lane is not None:
                lane.dropped = True
                lane.queue.clear()
        for ident, entry in list(self.known.items()):
            if entry.lane.key in keys:
                entry.state = DROPPED
                del self.known[ident]
        self.maybe_resume()

    # -- flow control ------------------------------------------------------------------

    def _check_pause(self) -> None:
        """Pause at the in-flight bound, or when every watcher's queue is full."""
        if self.paused:
            return
        limit = self.settings.subscriber_queue_size
        if len(self.known) >= self.settings.max_in_flight or (self._present and all(
                len(s._queue) >= limit for s in self._present)):
            self.paused = True
            self.producer.pause()

    def quiesce(self) -> None:
        """Fetch nothing new from now on (shutdown); what is in flight still resolves."""
        self.quiesced = True
        if not self.paused:
            self.paused = True
            self.producer.pause()

    def maybe_resume(self) -> None:
        """Resume once in-flight fell to half its bound and some queue to half of its own
        (a watcher that stays full is not waited for: new messages are held for it)."""
        if not self.paused or self.failure is not None or self.stopping or self.quiesced:
            return
        low_queue = self.low_queue
        if len(self.known) <= self.settings.max_in_flight // 2 and (not self._present or any(
                len(s._queue) <= low_queue for s in self._present)):
            self.paused = False
            self.producer.resume()

    # -- resolution ------------------------------------------------------------------------

    def ack(self, entry: Entry, watcher: str) -> None:
        if entry.state != IN_FLIGHT:
            return
        entry.pending -= 1
        if not entry.pending:
            self._resolved(entry)

    def reject(self, entry: Entry, watcher: str, reason: str) -> None:
        if entry.state != IN_FLIGHT:
            return
        if entry.rejected is None:
            entry.rejected = {}
        entry.rejected[watcher] = reason
        entry.pending -= 1
        if not entry.pending:
            self._resolved(entry)

    def fail(self, entry: Entry, watcher: str, why: str, *, counts: bool) -> None:
        """Fail one watcher for one message; ``counts`` towards ``max_attempts`` or not."""
        if entry.state != IN_FLIGHT:
            return
        if counts:
            if entry.attempts is None:
                entry.attempts = {}
            attempts = entry.attempts[watcher] = entry.attempts.get(watcher, 0) + 1
            if attempts >= self.settings.max_attempts:
                self.reject(entry, watcher, f"max attempts: {why}")
                return
        if entry.failed is None:
            entry.failed = {}
        entry.failed[watcher] = why
        entry.pending -= 1
        if not entry.pending:
            self._resolved(entry)

    def _resolved(self, entry: Entry) -> None:
        lane = entry.lane
        if not lane.advancing and lane.queue and lane.queue[0] is entry:
            lane.advancing = True
            task = self._spawn(self._advance_lane(lane))
            self._advancers.add(task)
            task.add_done_callback(self._advancers.discard)

    def _outcome(self, entry: Entry) -> AdvanceOutcome:
        failed, rejected, before = entry.failed, entry.rejected, entry.acked_before
        if failed is None and rejected is None and before is None and (
                entry.round_targets is self.cohort):
            return self._clean
        acked = entry.round_targets
        if failed:
            acked = acked - failed.keys()
        if rejected:
            acked = acked - rejected.keys()
        if before:
            acked = acked | before
        return AdvanceOutcome(
            acked=acked, failed=frozenset(failed) if failed else frozenset(),
            rejected=dict(rejected) if rejected else {},
            retry_after=self.settings.backoff(entry.rounds) if failed else 0.0)

    async def _advance_lane(self, lane: Lane) -> None:
        queue = lane.queue
        known = self.known
        clean = self._clean
        counters = self.counters
        try:
            while queue and not queue[0].pending and not lane.dropped and self.failure is None:
                items: list[AdvanceItem[Any]] = []
                finished: list[Entry] = []
                while queue and not queue[0].pending:
                    entry = queue.popleft()
                    outcome = self._outcome(entry)
                    if outcome is clean:
                        counters.clean += 1
                    else:
                        counters.count(outcome)
                    if outcome.failed:
                        entry.state = HELD
                        entry.acked_before = outcome.acked
                    else:
                        entry.state = ADVANCING
                        finished.append(entry)
                    items.append(AdvanceItem(entry.payload, outcome))
                await self.producer.advance(items)
                for entry in finished:
                    if known.get(entry.ident) is entry:
                        del known[entry.ident]
                    entry.state = DROPPED
                if self.paused:
                    self.maybe_resume()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("group %r: advance() of lane %r failed; evicting the group",
                          self.key, lane.key)
            self._fail_group(exc)
        finally:
            lane.advancing = False

    # -- unit of work -----------------------------------------------------------------------

    def submit(self, window: Window) -> None:
        if not self._to_submit:
            asyncio.get_running_loop().call_soon(self._flush)
        self._to_submit.append(window)

    def _flush(self) -> None:
        windows, self._to_submit = self._to_submit, []
        if not windows:
            return
        try:
            self.sink.submit(windows)
        except Exception as exc:
            log.exception("group %r: the work sink refused %d windows", self.key, len(windows))
            for window in windows:
                window.fail(exc)

    # -- ending ---------------------------------------------------------------------------------

    def _fail_group(self, exc: BaseException) -> None:
        if self.failure is not None or self.stopping:
            return
        self.failure = exc
        log.error("group %r failed: %r; failing watchers %s", self.key, exc, sorted(self.streams))
        self.manager._evict(self)
        self._cancel_timers()
        current = asyncio.current_task()
        for task in list(self._tasks):
            if task is not current:
                task.cancel()
        for stream in self._present:
            stream._fail(exc)
        self._drop_all()
        self._close_producer()

    async def stop(self) -> None:
        """Stop fetching, hand every resolved prefix to advance, abandon the rest, close.

        Unresolved messages are not committed: the broker redelivers them to the next
        consumer. Idempotent.
        """
        if self.stopping or self.failure is not None:
            if self._closed_producer is not None:
                await asyncio.shield(self._closed_producer)
            return
        self.stopping = True
        self._cancel_timers()
        if self._pump is not None:
            self._pump.cancel()
            await asyncio.gather(self._pump, return_exceptions=True)
        for stream in list(self._present):
            stream._detach(fail_pending=False)
        while self._advancers and self.failure is None:
            await asyncio.gather(*self._advancers, return_exceptions=True)
        self._drop_all()
        await self._close_producer()

    def _cancel_timers(self) -> None:
        if self._grace is not None:
            self._grace.cancel()
            self._grace = None

    def _drop_all(self) -> None:
        for entry in self.known.values():
            entry.state = DROPPED
        self.known.clear()
        for lane in self.lanes.values():
            lane.dropped = True
            lane.queue.clear()

    def _close_producer(self) -> asyncio.Task[None]:
        if self._closed_producer is None:
            self._closed_producer = asyncio.get_running_loop().create_task(self._aclose())
        return self._closed_producer

    async def _aclose(self) -> None:
        try:
            await self.producer.aclose()
        except Exception:
            log.exception("group %r: producer aclose() failed", self.key)

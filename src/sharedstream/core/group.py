"""One shared-stream group: an adapter, a fixed cohort, the partition ledger.

Flow: the pump task pulls what the adapter reads (``open_stream``); records are
admitted into the group's :class:`~sharedstream.core.ledger.Ledger`, whose entry is
the only per-message state, and the batch's entries go to every watcher's queue as
one chunk (one call per watcher per batch; a targeted message goes alone). Watchers
resolve each entry (ack / reject / fail) through their streams; the last outcome of a
delivery round settles it at once:

* all acked -> terminal;
* someone failed -> held: the entry is its partition's floor and a timer hands it
  out again, after the backoff of its round, to the watchers that still owe it;
* clean with rejections -> the adapter dead-letters it; terminal once durable.

Every ``commit_interval`` the group hands the adapter the commit targets of the
partitions that changed. Held entries count towards ``max_in_flight``: an absent
watcher lets its siblings run ahead by at most that many messages.

Its lifecycle and flow control are :mod:`sharedstream.core.groupstate`'s enums; what
a watcher's outcome does to an entry (ack, reject, fail, hold, redeliver, dead letter)
is :mod:`sharedstream.core.resolution`'s :class:`Resolution`, a base of :class:`Group`.

The group knows its manager only through the ``evict`` callback it is built with, so
this module does not import the manager's.

Failure windows: if the process dies, nothing beyond the published targets is
committed, so everything else is read again; what the ledger knew (acks of earlier
rounds, attempt counts) is lost with the process, and a re-read goes to everyone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Hashable, Sequence
from typing import TYPE_CHECKING, Any

from sharedstream.core import tracing
from sharedstream.core.contract import (
    PartitionRewound,
    PartitionsEnded,
    PartitionsStarted,
    Records,
    SharedStreamProducer,
)
from sharedstream.core.counters import GroupCounters
from sharedstream.core.groupstate import (
    CLOSING,
    FAILED,
    FLOW_MOVES,
    FLOWING,
    GATHERING,
    MOVES,
    PAUSED,
    POLLING,
    QUIESCED,
    STOPPING,
    Flow,
    GroupState,
)
from sharedstream.core.holds import HoldJournal, HoldKey
from sharedstream.core.ledger import Entry, Key, Ledger, State
from sharedstream.core.lifecycle import check_move
from sharedstream.core.resolution import Resolution
from sharedstream.core.snapshot import GroupSnapshot, HeldView, PartitionView
from sharedstream.core.stream import SharedStream
from sharedstream.core.streamconfig import (
    ABSENT,
    HELD_BEFORE,
    QUEUE_FULL,
    Clock,
    LoopClock,
    ManagerSettings,
    TimerHandle,
)
from sharedstream.core.window import Window, WorkSink

if TYPE_CHECKING:
    from sharedstream.core.subscriber import Subscriber

log = logging.getLogger(__name__)

NOT_IN_COHORT = "not in the cohort"


class ProducerStreamEnded(RuntimeError):
    """``open_stream()`` returned: a producer must stream for the group's whole life."""


class Group(Resolution):
    """Runtime state of one ``shared_stream_key``. Internal to the manager.

    ``evict`` is the manager's: called once when the group fails, so a later
    subscribe builds a fresh group.
    """

    def __init__(self, key: Hashable, cohort: frozenset[str],
                 producer: SharedStreamProducer[Any], founder: tuple[str, Subscriber],
                 settings: ManagerSettings, clock: Clock, sink: WorkSink,
                 evict: Callable[[Group], None], holds: HoldJournal | None = None) -> None:
        self.key = key
        self.holds = holds
        self.cohort = cohort
        self.producer = producer
        # The first subscriber: later ones must agree with its shared_stream_arguments().
        self.founder = founder
        self.settings = settings
        # A paused group resumes once every queue is at or below this mark.
        self.low_queue = settings.subscriber_queue_size // 2
        self.clock = clock
        self.sink = sink
        self._evict = evict
        self.streams: dict[str, SharedStream] = {}
        self.ledger = Ledger(f"group {key!r}", producer.request_fetch, producer.record_skipped)
        self.ledger.set_bounds(self.settings.max_in_flight, self.settings.max_in_flight_bytes)
        # Entries pending or held: what the group-wide in-flight bound counts.
        self.in_flight = 0
        self.state = GATHERING
        self.flow = FLOWING
        # ``flow is not FLOWING``, kept by _set_flow: each stream reads it per hand-out.
        self.paused = False
        self.failure: BaseException | None = None  # why it failed (state FAILED)
        self._present: list[SharedStream] = []
        self._absent: dict[str, str] | None = dict.fromkeys(cohort, ABSENT)
        self.counters = GroupCounters()
        self._to_submit: list[Window] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._redeliveries: set[TimerHandle] = set()
        # When each held entry is handed out again (clock time), for /status.
        self._held_due: dict[Entry, float] = {}
        self._held_timer: dict[Entry, TimerHandle] = {}  # for an operator's retry now
        self._publish_handle: asyncio.TimerHandle | None = None
        self._pump: asyncio.Task[None] | None = None
        self._grace: TimerHandle | None = self.clock.call_at(
            self.clock.now() + self.settings.cohort_grace_period, self._grace_expired)
        self._closed_producer: asyncio.Task[None] | None = None

    def _set_state(self, state: GroupState) -> None:
        self.state = check_move(f"group {self.key!r}", MOVES, self.state, state)

    def _set_flow(self, flow: Flow) -> None:
        self.flow = check_move(f"flow of group {self.key!r}", FLOW_MOVES, self.flow, flow)
        self.paused = flow is not FLOWING

    # -- membership ----------------------------------------------------------------

    def add(self, name: str) -> SharedStream:
        # The loop's own clock skips two calls per message on the hot path.
        now = (asyncio.get_running_loop().time if isinstance(self.clock, LoopClock)
               else self.clock.now)
        stream = SharedStream(self, name, now)
        self.streams[name] = stream
        self._membership_changed()
        if self.state is GATHERING and len(self.streams) == len(self.cohort):
            self._start_polling()
        return stream

    def remove(self, name: str, fail_pending: bool) -> None:
        stream = self.streams.pop(name)
        self._membership_changed()
        stream.detach(fail_pending)

    def _membership_changed(self) -> None:
        self._present = list(self.streams.values())
        absent = self.cohort - self.streams.keys()
        self._absent = dict.fromkeys(absent, ABSENT) if absent else None

    def _grace_expired(self) -> None:
        self._grace = None
        if self.state is GATHERING:
            log.warning("group %r: starting without %s after the grace period (held for them)",
                        self.key, sorted(self.cohort - self.streams.keys()))
            self._start_polling()

    def _start_polling(self) -> None:
        self._set_state(POLLING)
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
        ledger = self.ledger
        try:
            async for item in self.producer.open_stream(ledger):
                if isinstance(item, Records):
                    self._broadcast(item.items)
                elif isinstance(item, PartitionsStarted):
                    ledger.start(item.generation, item.starts, self._held(item))
                elif isinstance(item, PartitionsEnded):
                    self._forget(item.keys)
                elif isinstance(item, PartitionRewound):
                    ledger.rewound(item.key, item.generation)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._fail_group(exc)
            return
        self._fail_group(ProducerStreamEnded(f"open_stream() of group {self.key!r} returned"))

    def _held(self, started: PartitionsStarted) -> dict[Key, dict[int, frozenset[str]]]:
        """The holds the store remembered on these partitions, and those this process
        still tracks without a written row (a partition that left and came back while a
        unit of work of its old generation was in the sink)."""
        held = {key: dict(offsets) for key, offsets in started.held.items()}
        if self.holds is not None and self.holds:
            for topic, partition, _, _ in started.starts:
                for offset, watchers in self.holds.open_on(topic, partition).items():
                    known = held.setdefault((topic, partition), {})
                    known[offset] = known.get(offset, frozenset()) | watchers
        return held

    def _broadcast(self, items: Sequence[tuple[Any, Any]]) -> None:
        present, overflow = self._room()
        absent = self._absent
        if overflow is not None:
            absent = {**(absent or {}), **overflow}
        # A slice stays counted (no entry per message) when every watcher it goes to
        # takes batches and none is missing: anything else needs per-message records.
        counted = bool(present) and absent is None and tracing.tracer is None and all(
            stream.batch for stream in present)
        slices = self.ledger.admit(items, self.producer.size, counted)
        self._schedule_publish()
        if not slices:
            return
        n_present = len(present)
        cohort = self.cohort
        for run in slices:
            run.targets = cohort
            run.pending = n_present
            if counted and run.entries is None and [
                    r.targets for r in run.records].count(None) == run.n:
                self.counters.received += run.n
                self.in_flight += run.n
                for stream in present:
                    stream.offer(run)
            else:
                entries = run.ledger.itemise(run)
                self.counters.received += len(entries)
                self.in_flight += len(entries)
                self._broadcast_entries(entries, present, absent)
        for stream in present:
            stream.wake()
        self._check_pause()

    def _broadcast_entries(self, entries: list[Entry], present: list[SharedStream],
                           absent: dict[str, str] | None) -> None:
        """Hand out an itemised slice: targeted messages (replayed dead letters) alone, and
        a failure record per message for the watchers that are missing."""
        cohort = self.cohort
        n_present = len(present)
        held = entries[0].ledger.held if entries else None
        run = 0  # where the run of entries addressed to everyone, not yet offered, starts
        for i, entry in enumerate(entries):
            targets = entry.payload.targets
            owed = held.pop(entry.offset, None) if held else None
            if owed is not None:  # not rows of another group, nor watchers a replay skips
                owed &= cohort if targets is None else targets
            if targets is None and not owed:
                entry.targets = entry.round_targets = cohort
                entry.pending = n_present
                if absent is not None:
                    entry.failed = dict(absent)
                    self.owe(entry, absent)
                if not n_present:
                    self._resolved(entry)
            else:  # a replayed dead letter or a remembered hold: what precedes goes first
                if run < i:
                    self._offer(present, entries[run:i])
                run = i + 1
                if owed:
                    entry.targets = cohort if targets is None else targets
                    self._remembered_hold(entry, owed)
                else:
                    entry.targets = targets
                    self._deliver(entry, targets)
        if held and entries and max(held) < entries[-1].offset:
            held.clear()  # offsets never read (compacted away): stop itemising for them
        if n_present and run < len(entries):
            self._offer(present, entries if not run else entries[run:])

    def _remembered_hold(self, entry: Entry, owed: frozenset[str]) -> None:
        """A message some watchers still owed when the partition was last owned (the
        process died, or the partition moved): it goes to the others as any message
        read again, and to those watchers as a retry after its backoff, marked
        ``catching_up``, as if they had just failed it (no attempt counted)."""
        holds = self.holds
        if holds is not None:
            topic, partition = entry.ledger.key
            for watcher in owed:
                holds.loaded(HoldKey(watcher, topic, partition, entry.offset))
        self._deliver(entry, entry.targets - owed, dict.fromkeys(owed, HELD_BEFORE))

    @staticmethod
    def _offer(present: list[SharedStream], chunk: list[Entry]) -> None:
        for stream in present:
            stream.offer(chunk)

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
        lengths = [s.queued for s in present]
        bound = self.settings.subscriber_queue_size + min(lengths)
        if max(lengths) < bound:
            return present, None
        return ([s for s, n in zip(present, lengths, strict=True) if n < bound],
                {s.name: QUEUE_FULL for s, n in zip(present, lengths, strict=True) if n >= bound})

    def _deliver(self, entry: Entry, targets: frozenset[str],
                 failed: dict[str, str] | None = None) -> None:
        """Slow path: a targeted message or a redelivery round (``failed``: the watchers
        failed for it already, outside ``targets``)."""
        entry.round_targets = targets
        entry.failed = failed
        pending = 0
        for name in targets:
            stream = self.streams.get(name)
            if stream is not None:
                stream.offer([entry])
                pending += 1
            elif name in self.cohort:
                if entry.failed is None:
                    entry.failed = {}
                entry.failed[name] = ABSENT
                self.owe(entry, (name,))
            else:
                # A replayed dead letter naming a watcher that no longer exists goes
                # back to the dead-letter topic rather than vanishing.
                if entry.rejected is None:
                    entry.rejected = {}
                entry.rejected[name] = NOT_IN_COHORT
        entry.pending = pending
        if not pending:
            self._resolved(entry)

    def _forget(self, keys: frozenset[Any]) -> None:
        """The adapter lost these partitions: drop their in-flight and held messages."""
        self.in_flight -= self.ledger.end(keys)
        if self.holds is not None:
            for topic, partition in keys:
                self.holds.forget(topic, partition)
        for stream in self._present:
            stream.dropped()
        self.maybe_resume()

    # -- flow control ------------------------------------------------------------------

    def _check_pause(self) -> None:
        """Pause at the in-flight bound, or when every watcher's queue is full."""
        if self.paused:
            return
        limit = self.settings.subscriber_queue_size
        if self.in_flight >= self.settings.max_in_flight or (self._present and all(
                s.queued >= limit for s in self._present)):
            self._set_flow(PAUSED)
            self.producer.pause()

    def quiesce(self) -> None:
        """Fetch nothing new from now on (shutdown); what is in flight still resolves.
        Idempotent."""
        flow = self.flow
        if flow is QUIESCED:
            return
        self._set_flow(QUIESCED)
        if flow is FLOWING:
            self.producer.pause()

    def maybe_resume(self) -> None:
        """Resume once in-flight fell to half its bound and some queue to half of its own
        (a watcher that stays full is not waited for: new messages are held for it)."""
        if self.flow is not PAUSED or self.state is not POLLING:
            return
        low_queue = self.low_queue
        if self.in_flight <= self.settings.max_in_flight // 2 and (not self._present or any(
                s.queued <= low_queue for s in self._present)):
            self._set_flow(FLOWING)
            self.producer.resume()

    def snapshot(self) -> GroupSnapshot:
        """Partitions and held messages now (on the loop; for ``/status``)."""
        now = self.clock.now()
        partitions, held = [], []
        for ledger in self.ledger.partitions.values():
            position = ledger.next if ledger.slices else ledger.base
            partitions.append(PartitionView(
                ledger.topic, ledger.partition, ledger.base,
                next(ledger.open_offsets(), position), position,
                len(ledger.remembered), ledger.held_count, ledger.open_bytes,
                ledger.fetch.name.lower()))
            if not ledger.held_count:
                continue
            for run in ledger.slices:  # held entries are itemised: counted slices hold none
                for entry in run.entries or ():
                    if entry.state is not State.HELD:
                        continue
                    due = self._held_due.get(entry)
                    held.append(HeldView(ledger.topic, ledger.partition, entry.offset,
                                         dict(entry.failed or {}), dict(entry.attempts or {}),
                                         entry.rounds,
                                         None if due is None else max(0.0, due - now)))
        return GroupSnapshot(partitions, held)

    # -- commit targets -------------------------------------------------------------------

    def _schedule_publish(self) -> None:
        if self._publish_handle is None and self.state is not CLOSING and (
                self.state is not FAILED):
            self._publish_handle = asyncio.get_running_loop().call_later(
                self.producer.commit_interval, self._publish)

    def _publish(self) -> None:
        """Hand the adapter the commit targets of the partitions that changed."""
        self._publish_handle = None
        targets = self.ledger.publish()
        if targets:
            self.producer.publish(targets)

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
        if self.state is not POLLING and self.state is not GATHERING:
            return
        self._set_state(FAILED)
        self.failure = exc
        log.error("group %r failed: %r; failing watchers %s", self.key, exc, sorted(self.streams))
        self._evict(self)
        self._cancel_timers()
        current = asyncio.current_task()
        for task in list(self._tasks):
            if task is not current:
                task.cancel()
        for stream in self._present:
            stream.group_failed(exc)
        self.in_flight -= self.ledger.end_all()
        self._close_producer()

    async def stop(self) -> None:
        """Stop fetching, abandon what is unresolved, close (the adapter commits what
        resolved and delivers what is delivering).

        Unresolved messages are not committed: the broker redelivers them to the next
        consumer. Idempotent.
        """
        if self.state is not POLLING and self.state is not GATHERING:
            if self._closed_producer is not None:
                await asyncio.shield(self._closed_producer)
            return
        self._set_state(STOPPING)
        self._cancel_timers()
        if self._pump is not None:
            self._pump.cancel()
            await asyncio.gather(self._pump, return_exceptions=True)
        for stream in list(self._present):
            stream.detach(fail_pending=False)
        await self._close_producer()
        self.in_flight -= self.ledger.end_all()

    def _cancel_timers(self) -> None:
        if self._grace is not None:
            self._grace.cancel()
            self._grace = None
        for handle in self._redeliveries:
            handle.cancel()
        self._redeliveries.clear()
        self._held_due.clear()
        self._held_timer.clear()
        if self._publish_handle is not None:
            self._publish_handle.cancel()
            self._publish_handle = None

    def _close_producer(self) -> asyncio.Task[None]:
        if self._closed_producer is None:
            if self.state is STOPPING:
                self._set_state(CLOSING)
            self._closed_producer = asyncio.get_running_loop().create_task(self._aclose())
        return self._closed_producer

    async def _aclose(self) -> None:
        try:
            await self.producer.aclose()
        except Exception:
            log.exception("group %r: producer aclose() failed", self.key)

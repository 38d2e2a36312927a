"""One shared-stream group: an adapter, a fixed cohort, the partition ledger.

Flow: the pump task pulls what the adapter reads (``open_stream``); records are
admitted into the group's :class:`~sharedstream.core.ledger.Ledger`, whose entry is
the only per-message state, and the batch goes to the watchers' queues as one chunk
per watcher (every watcher, or, when some watcher has a match, the watchers routed
each message: :mod:`sharedstream.core.fanout`; a targeted message goes alone). Watchers
resolve each entry (ack / reject / fail) through their streams; the last outcome of a
delivery round settles it at once:

* all acked -> terminal;
* someone failed -> held: the entry is its partition's floor and a timer hands it
  out again, after the backoff of its round, to the watchers that still owe it;
* clean with rejections -> the adapter dead-letters it; terminal once durable.

Every ``commit_interval`` the group hands the adapter the commit targets of the
partitions that changed. Held entries count towards ``max_in_flight``: an absent
watcher lets its siblings run ahead by at most that many messages. When fetching pauses
and resumes is :mod:`sharedstream.core.flowcontrol`'s one decision; a slow watcher's
full queue pauses it (lag), it never fails the watcher.

Its lifecycle and flow control are :mod:`sharedstream.core.groupstate`'s enums; what
a watcher's outcome does to an entry (ack, reject, fail, hold, redeliver, dead letter)
is :mod:`sharedstream.core.resolution`'s :class:`Resolution`, and how a batch is handed
out :mod:`sharedstream.core.fanout`'s :class:`Fanout`, both bases of :class:`Group`.

The group knows its manager only through the ``evict`` callback it is built with, so
this module does not import the manager's.

Failure windows: if the process dies, nothing beyond the published targets is
committed, so everything else is read again; what the ledger knew (acks of earlier
rounds, attempt counts) is lost with the process, and a re-read goes to everyone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Hashable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from sharedstream.core.contract import (
    PartitionRewound,
    PartitionsEnded,
    PartitionsStarted,
    Records,
    SharedStreamProducer,
)
from sharedstream.core.counters import GroupCounters
from sharedstream.core.fanout import Fanout
from sharedstream.core.flowcontrol import FlowControl, Pause
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
from sharedstream.core.holds import HoldJournal
from sharedstream.core.ledger import Entry, Key, Ledger, State
from sharedstream.core.lifecycle import check_move
from sharedstream.core.names import framework_task_name, summarise
from sharedstream.core.resolution import Resolution
from sharedstream.core.routes import Routes
from sharedstream.core.snapshot import GroupSnapshot, HeldView, PartitionView
from sharedstream.core.stream import SharedStream
from sharedstream.core.streamconfig import (
    ABSENT,
    Clock,
    LoopClock,
    ManagerSettings,
    TimerHandle,
)
from sharedstream.core.window import Window, WorkSink

if TYPE_CHECKING:
    from sharedstream.core.subscriber import Subscriber

log = logging.getLogger(__name__)

class ProducerStreamEnded(RuntimeError):
    """``open_stream()`` returned: a producer must stream for the group's whole life."""


class Group(Fanout, Resolution):
    """Runtime state of one ``shared_stream_key``. Internal to the manager.

    ``evict`` is the manager's: called once when the group fails, so a later
    subscribe builds a fresh group.
    """

    def __init__(self, key: Hashable, cohort: frozenset[str],
                 producer: SharedStreamProducer[Any], founder: tuple[str, Subscriber],
                 settings: ManagerSettings, clock: Clock, sink: WorkSink,
                 evict: Callable[[Group], None], matches: Mapping[str, Any] | None = None,
                 holds: HoldJournal | None = None) -> None:
        self.key = key
        self.holds = holds
        self.cohort = cohort
        self.producer = producer
        # The first subscriber: later ones must agree with its shared_stream_arguments().
        self.founder = founder
        self.settings = settings
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
        self.counters = GroupCounters()
        # The one flow decision (core.flowcontrol); streams read ``low_queue`` on hand-out.
        self.flow_control = FlowControl(settings.max_in_flight,
                                        settings.subscriber_queue_size, self.counters.lagged)
        self.low_queue = self.flow_control.low_queue
        self.pause_reason: Pause | None = None  # why the group is PAUSED
        self._present: list[SharedStream] = []
        self._absent: dict[str, str] | None = dict.fromkeys(cohort, ABSENT)
        # Routing (core.routes): the watchers' matches, the index, who takes everything.
        self.routes = Routes(cohort, matches or {})
        # The present streams the flow control watches: those taking everything.
        self._everyone: list[SharedStream] = []
        self._all_batch = False
        self._membership_stale = True
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

    def add(self, name: str, match: Any = None) -> SharedStream:
        """A watcher joins; ``match`` is what it wants (None: everything), validated."""
        self.routes.set_match(name, match)
        # The loop's own clock skips two calls per message on the hot path.
        now = (asyncio.get_running_loop().time if isinstance(self.clock, LoopClock)
               else self.clock.now)
        stream = SharedStream(self, name, now)
        self.streams[name] = stream
        self._membership_stale = True
        if self.state is GATHERING and len(self.streams) == len(self.cohort):
            self._start_polling()
        return stream

    def remove(self, name: str, fail_pending: bool) -> None:
        stream = self.streams.pop(name)
        self._membership_stale = True
        stream.detach(fail_pending)
        self.flow_control.left(name)
        self.maybe_resume()

    def _members(self) -> list[SharedStream]:
        """The present streams, brought up to date after watchers came or went: once per
        change, when next asked, not per subscribe (10,000 watchers subscribing one by
        one would otherwise cost O(watchers) each)."""
        if self._membership_stale:
            self._membership_stale = False
            self._present = list(self.streams.values())
            absent = self.cohort - self.streams.keys()
            self._absent = dict.fromkeys(absent, ABSENT) if absent else None
            routed = self.routes.routed
            self._everyone = ([s for s in self._present if s.name not in routed] if routed
                              else self._present)
            # A batch runner marks its stream as it subscribes, before anything awaits.
            self._all_batch = all(s.batch for s in self._present)
        return self._present

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
        self._pump = self._spawn(self._run_pump(),
                                 framework_task_name(f"fan-out of group {self.key!r}"))

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str | None = None
               ) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
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

    def _forget(self, keys: frozenset[Any]) -> None:
        """The adapter lost these partitions: drop their in-flight and held messages."""
        self.in_flight -= self.ledger.end(keys)
        if self.holds is not None:
            for topic, partition in keys:
                self.holds.forget(topic, partition)
        for stream in self._members():
            stream.dropped()
        self.maybe_resume()

    # -- flow control ------------------------------------------------------------------

    def _check_pause(self, handed: Iterable[SharedStream]) -> None:
        """A batch went to ``handed`` (the watchers given something): pause if the flow
        control says so (:mod:`sharedstream.core.flowcontrol`: the in-flight bound, or a
        watcher's full queue, which is its lag, never its failure)."""
        reason = self.flow_control.handed(self.in_flight, handed)
        if reason is not None and not self.paused:
            self.pause_reason = reason
            self._set_flow(PAUSED)
            self.producer.pause()

    def quiesce(self) -> None:
        """Fetch nothing new from now on (shutdown); what is in flight still resolves.
        Idempotent."""
        flow = self.flow
        if flow is QUIESCED:
            return
        self._set_flow(QUIESCED)
        self.pause_reason = None
        if flow is FLOWING:
            self.producer.pause()

    def maybe_resume(self) -> None:
        """Resume when the flow control allows it (in flight down to half its bound, and
        every lagging watcher's queue to half of its own)."""
        if self.flow is not PAUSED or self.state is not POLLING:
            return
        if self.flow_control.may_resume(self.in_flight):
            self.pause_reason = None
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
        log.error("group %r failed: %r; failing its %s", self.key, exc, summarise(self.streams))
        self._evict(self)
        self._cancel_timers()
        current = asyncio.current_task()
        for task in list(self._tasks):
            if task is not current:
                task.cancel()
        for stream in self._members():
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
        for stream in list(self._members()):
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

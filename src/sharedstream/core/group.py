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

The group is made of parts, one job each, each with its own state, composed (none is
a base class of another, and none reads another's private fields):

* :class:`~sharedstream.core.fanout.Fanout` (``fanout``): admission and routing of a
  batch and its hand-out to the present watchers' streams;
* :class:`~sharedstream.core.resolution.Resolution` (``resolution``): each watcher's
  outcome, settlement, holds, redelivery and every targeted delivery round;
* :class:`~sharedstream.core.flowcontrol.FlowControl` (``flow_control``): what is in
  flight and the one pause/resume decision, applied through the group's ``_apply_flow``;
* :class:`~sharedstream.core.targets.CommitTargets` (``targets``): the publish timer;
* :class:`~sharedstream.core.outbox.WindowOutbox`: closed windows to the unit-of-work
  sink, once per loop step (the streams' ``submit``);
* :class:`~sharedstream.core.groupstate.Lifecycle` (``life``): the group's state, read
  by the parts that must stop acting when it ends.

The group itself keeps membership (``add``/``remove``), the intake (the pump and the
partitions' starts and ends), ``/status``'s snapshot and its ending.
To its streams it is their :class:`~sharedstream.core.stream.StreamOwner`: the outcome
methods a stream calls are the resolution's, bound once as the group's attributes, so
a stream's ``ack_many`` goes straight to the resolution in one call, and ``paused``
is a plain attribute read per hand-out, kept by ``_apply_flow``.

The group knows its manager only through the ``evict`` callback it is built with, so
this module does not import the manager's.

Failure windows: if the process dies, nothing beyond the published targets is
committed, so everything else is read again; what the ledger knew (acks of earlier
rounds, attempt counts) is lost with the process, and a re-read goes to everyone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Hashable, Mapping
from typing import Any

from sharedstream.core.contract import (
    PartitionRewound,
    PartitionsEnded,
    PartitionsStarted,
    Records,
    SharedStreamProducer,
)
from sharedstream.core.counters import GroupCounters
from sharedstream.core.fanout import Fanout
from sharedstream.core.flowcontrol import FlowControl
from sharedstream.core.groupstate import (
    CLOSING,
    FAILED,
    GATHERING,
    POLLING,
    STOPPING,
    GroupState,
    Lifecycle,
)
from sharedstream.core.holds import HoldJournal
from sharedstream.core.ledger import Key, Ledger, State
from sharedstream.core.names import framework_task_name, summarise
from sharedstream.core.outbox import WindowOutbox
from sharedstream.core.resolution import Resolution
from sharedstream.core.routes import Routes
from sharedstream.core.snapshot import GroupSnapshot, HeldView, PartitionView
from sharedstream.core.stream import SharedStream
from sharedstream.core.streamconfig import (
    Clock,
    LoopClock,
    ManagerSettings,
    TimerHandle,
)
from sharedstream.core.targets import CommitTargets
from sharedstream.core.window import WorkSink

log = logging.getLogger(__name__)


class ProducerStreamEnded(RuntimeError):
    """``open_stream()`` returned: a producer must stream for the group's whole life."""


class Group:
    """Runtime state of one ``shared_stream_key``. Internal to the manager.

    ``evict`` is the manager's: called once when the group fails, so a later
    subscribe builds a fresh group.
    """

    def __init__(self, key: Hashable, cohort: frozenset[str],
                 producer: SharedStreamProducer[Any],
                 settings: ManagerSettings, clock: Clock, sink: WorkSink,
                 evict: Callable[[Group], None], matches: Mapping[str, Any] | None = None,
                 holds: HoldJournal | None = None) -> None:
        self.key = key
        self.holds = holds
        self.cohort = cohort
        self.producer = producer
        self.settings = settings
        self.clock = clock
        self._evict = evict
        self.streams: dict[str, SharedStream] = {}
        self.ledger = Ledger(f"group {key!r}", producer.request_fetch, producer.record_skipped)
        self.ledger.set_bounds(self.settings.max_in_flight, self.settings.max_in_flight_bytes)
        self.life = Lifecycle(f"group {key!r}")
        # ``flow_control.flow is not FLOWING``, kept by _apply_flow: streams read it per
        # hand-out, so it is a plain attribute here.
        self.paused = False
        self.failure: BaseException | None = None  # why it failed (state FAILED)
        self.counters = GroupCounters()
        # Routing (core.routes): the watchers' matches, the index, who takes everything.
        self.routes = Routes(cohort, matches or {})
        self.flow_control = FlowControl(settings.max_in_flight, settings.subscriber_queue_size,
                                        self.counters.lagged, self._apply_flow,
                                        f"flow of group {key!r}")
        self.targets = CommitTargets(self.ledger, producer, self.life)
        self.resolution = Resolution(key, cohort, producer, settings, clock, self.ledger,
                                     self.counters, self.streams, holds, self.life,
                                     self.flow_control, self.targets, self._fail_group)
        self.fanout = Fanout(cohort, producer, self.ledger, self.counters, self.streams,
                             self.routes, self.flow_control, self.resolution, self.targets)
        # What a stream calls back (its StreamOwner), bound once: one call each, straight
        # to the part that does it.
        resolution = self.resolution
        self.ack, self.ack_many, self.ack_range, self.share_done = (
            resolution.ack, resolution.ack_many, resolution.ack_range, resolution.share_done)
        self.reject, self.fail = resolution.reject, resolution.fail
        self.itemise = resolution.itemise
        self.ready = self.fanout.ready
        self.maybe_resume = self.flow_control.maybe_resume
        self.low_queue = self.flow_control.low_queue
        self.submit = WindowOutbox(key, sink).submit
        self._tasks: set[asyncio.Task[None]] = set()
        self._pump: asyncio.Task[None] | None = None
        self._grace: TimerHandle | None = self.clock.call_at(
            self.clock.now() + self.settings.cohort_grace_period, self._grace_expired)
        self._closed_producer: asyncio.Task[None] | None = None

    @property
    def state(self) -> GroupState:
        return self.life.state

    @property
    def in_flight(self) -> int:
        """Entries pending or held: what the group-wide in-flight bound counts."""
        return self.flow_control.in_flight

    def _apply_flow(self, fetch: bool) -> None:
        """The flow control's decision applied: the adapter fetches or not."""
        self.paused = not fetch
        if fetch:
            self.producer.resume()
        else:
            self.producer.pause()

    # -- membership ----------------------------------------------------------------

    def add(self, name: str, match: Any = None) -> SharedStream:
        """A watcher joins; ``match`` is what it wants (None: everything), validated."""
        self.routes.set_match(name, match)
        # The loop's own clock skips two calls per message on the hot path.
        now = (asyncio.get_running_loop().time if isinstance(self.clock, LoopClock)
               else self.clock.now)
        stream = SharedStream(self, name, now)
        self.streams[name] = stream
        self.fanout.changed()
        if self.life.state is GATHERING and len(self.streams) == len(self.cohort):
            self._start_polling()
        return stream

    def remove(self, name: str, fail_pending: bool) -> None:
        stream = self.streams.pop(name)
        self.fanout.changed()
        stream.detach(fail_pending)
        self.flow_control.left(name)
        self.flow_control.maybe_resume()

    def _grace_expired(self) -> None:
        self._grace = None
        if self.life.state is GATHERING:
            log.warning("group %r: starting without %s after the grace period (held for them)",
                        self.key, sorted(self.cohort - self.streams.keys()))
            self._start_polling()

    def _start_polling(self) -> None:
        self.life.move(POLLING)
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
        ledger, hand_out = self.ledger, self.fanout.hand_out
        try:
            async for item in self.producer.open_stream(ledger):
                if isinstance(item, Records):
                    hand_out(item.items)
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
        self.flow_control.in_flight -= self.ledger.end(keys)
        if self.holds is not None:
            for topic, partition in keys:
                self.holds.forget(topic, partition)
        for stream in self.fanout.members():
            stream.dropped()
        self.flow_control.maybe_resume()

    # -- status ----------------------------------------------------------------------

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
                    due = self.resolution.due(entry)
                    held.append(HeldView(ledger.topic, ledger.partition, entry.offset,
                                         dict(entry.failed or {}), dict(entry.attempts or {}),
                                         entry.rounds,
                                         None if due is None else max(0.0, due - now)))
        return GroupSnapshot(partitions, held)

    # -- ending ---------------------------------------------------------------------------------

    def _fail_group(self, exc: BaseException) -> None:
        if self.life.state is not POLLING and self.life.state is not GATHERING:
            return
        self.life.move(FAILED)
        self.flow_control.ended()
        self.failure = exc
        log.error("group %r failed: %r; failing its %s", self.key, exc, summarise(self.streams))
        self._evict(self)
        self._cancel_timers()
        current = asyncio.current_task()
        for task in list(self._tasks):
            if task is not current:
                task.cancel()
        for stream in self.fanout.members():
            stream.group_failed(exc)
        self.flow_control.in_flight -= self.ledger.end_all()
        self._close_producer()

    async def stop(self) -> None:
        """Stop fetching, abandon what is unresolved, close (the adapter commits what
        resolved and delivers what is delivering).

        Unresolved messages are not committed: the broker redelivers them to the next
        consumer. Idempotent.
        """
        if self.life.state is not POLLING and self.life.state is not GATHERING:
            if self._closed_producer is not None:
                await asyncio.shield(self._closed_producer)
            return
        self.life.move(STOPPING)
        self.flow_control.ended()
        self._cancel_timers()
        if self._pump is not None:
            self._pump.cancel()
            await asyncio.gather(self._pump, return_exceptions=True)
        for stream in list(self.fanout.members()):
            stream.detach(fail_pending=False)
        await self._close_producer()
        self.flow_control.in_flight -= self.ledger.end_all()

    def _cancel_timers(self) -> None:
        if self._grace is not None:
            self._grace.cancel()
            self._grace = None
        self.resolution.cancel_timers()
        self.targets.cancel()

    def _close_producer(self) -> asyncio.Task[None]:
        if self._closed_producer is None:
            if self.life.state is STOPPING:
                self.life.move(CLOSING)
            self._closed_producer = asyncio.get_running_loop().create_task(self._aclose())
        return self._closed_producer

    async def _aclose(self) -> None:
        try:
            await self.producer.aclose()
        except Exception:
            log.exception("group %r: producer aclose() failed", self.key)

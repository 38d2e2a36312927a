"""SharedStreamManager: groups by key, fixed cohorts, watcher runners.

The triggerer declares each group's cohort (every watcher of that key in the
loaded modules), then runs each watcher with :meth:`SharedStreamManager.run_watcher`
(or drives :meth:`SharedStreamManager.subscribe` streams itself). The manager
builds one producer per group from the first subscriber, starts polling when the
whole cohort is there (or the grace period ran out), and stops the group when the
last watcher leaves.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sharedstream.core.backoff import retry_delay
from sharedstream.core.batch import BatchRunner, batch_filter, value_preparer
from sharedstream.core.contract import SharedStreamProducer
from sharedstream.core.counters import GroupCounters
from sharedstream.core.event import TriggerEvent
from sharedstream.core.group import Group
from sharedstream.core.groupstate import POLLING
from sharedstream.core.holds import HoldJournal
from sharedstream.core.routes import check_match
from sharedstream.core.snapshot import GroupSnapshot
from sharedstream.core.stream import SharedStream
from sharedstream.core.streamconfig import (
    Clock,
    GroupFailedError,
    InfrastructureError,
    LoopClock,
    ManagerSettings,
    ProducerFactoryError,
)
from sharedstream.core.subscriber import Subscriber, check_shared_stream_group
from sharedstream.core.window import WorkSink

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class GroupStatus:
    """One group as ``/readyz`` and ``/metrics`` see it."""

    key: Hashable
    producer: SharedStreamProducer[Any]
    cohort: frozenset[str]
    present: frozenset[str]
    polling: bool
    paused: bool
    in_flight: int
    queued: int
    counters: GroupCounters
    # What each watcher with a match wants (the others take every message).
    matches: Mapping[str, Any] = field(default_factory=dict)
    # Why fetching is paused ("in_flight" or "lag"; None: it flows, or shuts down).
    paused_because: str | None = None
    # The watchers whose full queues hold the flow back now (lag), with their queues.
    lagging: Mapping[str, int] = field(default_factory=dict)


class SharedStreamManager:
    """Fans each group's single poll loop out to its cohort and gates commits on acks.

    All methods run on one event loop. ``sink`` receives closed windows that have
    events or staged state (the unit of work); see :mod:`sharedstream.core.window`.
    """

    def __init__(self, sink: WorkSink, settings: ManagerSettings | None = None,
                 clock: Clock | None = None, holds: HoldJournal | None = None) -> None:
        """``holds``: the journal of holds the sink writes with its units of work
        (:mod:`sharedstream.core.holds`); None keeps no hold beyond the process."""
        self.sink = sink
        self.holds = holds
        self.settings = settings or ManagerSettings()
        self.clock: Clock = clock or LoopClock()
        self._cohorts: dict[Hashable, frozenset[str]] = {}
        self._matches: dict[Hashable, Mapping[str, Any]] = {}
        self._groups: dict[Hashable, Group] = {}
        # Each running group's first subscriber: later ones must agree with its
        # shared_stream_arguments() (checked here, before the group is touched).
        self._founders: dict[Group, tuple[str, Subscriber]] = {}
        self._membership: dict[str, Group] = {}
        self._stopping: set[asyncio.Task[None]] = set()

    # -- cohorts and membership ---------------------------------------------------------

    def declare_cohort(self, key: Hashable, watcher_names: Iterable[str],
                       matches: Mapping[str, Any] | None = None) -> None:
        """Fix the watchers of group ``key``: polling waits for all of them.

        ``matches`` says what each watcher wants (its trigger's ``match``; absent or None:
        everything), so that what is held for a watcher not subscribed yet is only what
        is routed to it. Redeclaring the same set is a no-op; changing it while the group
        runs is an error.
        """
        if key is None:
            raise ValueError("a shared-stream key cannot be None")
        names = list(watcher_names)
        cohort = frozenset(names)
        if not cohort:
            raise ValueError(f"cohort of {key!r} is empty")
        if len(cohort) != len(names):
            dupes = sorted({n for n in names if names.count(n) > 1})
            raise ValueError(f"cohort of {key!r} names {dupes} more than once")
        current = self._cohorts.get(key)
        if current is not None and current != cohort and key in self._groups:
            raise ValueError(f"cohort of running group {key!r} cannot change "
                             f"({sorted(current)} -> {sorted(cohort)})")
        self._cohorts[key] = cohort
        self._matches[key] = dict(matches or {})

    def subscribe(self, watcher: str, trigger: Subscriber) -> SharedStream:
        """Join ``watcher`` to its trigger's group and return the stream its filter reads.

        The first subscriber of a key builds the producer (a factory failure raises
        :class:`ProducerFactoryError`, terminal). Raises ValueError for a None key, a
        watcher already subscribed, an undeclared cohort or a watcher outside it;
        and :class:`SharedStreamConflictError` (a ValueError) for a trigger whose
        ``shared_stream_arguments()`` differ from the group's first trigger (naming both),
        and :class:`~sharedstream.core.routing.MatchError` (a ValueError) for a trigger
        whose ``match`` is not valid.
        """
        return self._join(watcher, trigger)[1]

    def _join(self, watcher: str, trigger: Subscriber) -> tuple[Group, SharedStream]:
        """``subscribe``, one way: every check here first (``routes.check_match``, and
        ``subscriber.check_shared_stream_group`` against the founder the manager keeps),
        then one call into the group (``add``), which builds the stream and returns it;
        nothing after reads or calls the group to finish the registration."""
        key = trigger.shared_stream_key()
        if key is None:
            raise ValueError(f"watcher {watcher!r}: {type(trigger).__qualname__} does not "
                             "share a stream (shared_stream_key() is None)")
        if watcher in self._membership:
            raise ValueError(f"watcher {watcher!r} is already subscribed")
        cohort = self._cohorts.get(key)
        if cohort is None:
            raise ValueError(f"watcher {watcher!r}: no cohort declared for {key!r}")
        if watcher not in cohort:
            raise ValueError(f"watcher {watcher!r} is not in the cohort of {key!r}: "
                             f"{sorted(cohort)}")
        match = getattr(trigger, "match", None)
        group = self._groups.get(key)
        if group is None or not group.routes.validated(watcher, match):
            check_match(watcher, match)
        if group is None:
            arguments = trigger.shared_stream_arguments()
            try:
                producer = type(trigger).create_shared_stream_producer(arguments)
            except Exception as exc:
                raise ProducerFactoryError(
                    f"watcher {watcher!r}: building the producer of {key!r} failed: {exc!r}"
                ) from exc
            group = self._groups[key] = Group(key, cohort, producer, self.settings, self.clock,
                                              self.sink, self._evict, self._matches.get(key),
                                              self.holds)
            self._founders[group] = (watcher, trigger)
        else:
            check_shared_stream_group([self._founders[group], (watcher, trigger)])
        stream = group.add(watcher, match)
        self._membership[watcher] = group
        return group, stream

    async def unsubscribe(self, watcher: str) -> None:
        """Leave the group. What the watcher still owed is held for it (counted failed,
        no attempt used) and redelivered when it is back; the last one leaving stops
        the group (what resolved is committed, the rest abandoned to redelivery)."""
        group = self._membership.get(watcher)
        if group is not None:
            await self._leave(group, group.streams[watcher])

    async def _leave(self, group: Group, stream: SharedStream) -> None:
        name = stream.name
        if self._membership.get(name) is not group or group.streams.get(name) is not stream:
            return  # already left, or evicted with its group
        del self._membership[name]
        if len(group.streams) > 1:
            group.remove(name, fail_pending=True)
            return
        self._evict(group)  # a racing subscribe now gets a fresh group
        group.remove(name, fail_pending=False)
        task = asyncio.get_running_loop().create_task(group.stop())
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)
        await asyncio.shield(task)

    def _evict(self, group: Group) -> None:
        if self._groups.get(group.key) is group:
            del self._groups[group.key]
        self._founders.pop(group, None)
        for name in group.streams:
            if self._membership.get(name) is group:
                del self._membership[name]

    async def stop_all(self) -> None:
        """Stop every group: commit what resolved, abandon the rest, close.

        Watchers' streams end (StopAsyncIteration), so runners return normally.
        """
        groups = list(self._groups.values())
        for group in groups:
            self._evict(group)
        await asyncio.gather(*(g.stop() for g in groups), *self._stopping)

    def group_key_of(self, watcher: str) -> Hashable | None:
        """The key of the group a watcher is subscribed to, or None."""
        group = self._membership.get(watcher)
        return None if group is None else group.key

    def status(self) -> list[GroupStatus]:
        """A snapshot of every running group, for readiness and metrics."""
        return [GroupStatus(key=g.key, producer=g.producer, cohort=g.cohort,
                            present=frozenset(g.streams), polling=g.state is POLLING,
                            paused=g.paused, in_flight=g.in_flight,
                            queued=sum(s.queued for s in g.streams.values()),
                            counters=g.counters, matches=dict(g.routes.matches),
                            paused_because=_reason(g), lagging=g.flow_control.lagging)
                for g in self._groups.values()]

    def snapshots(self) -> list[tuple[GroupStatus, GroupSnapshot]]:
        """Each running group's status with its partitions and held messages (on the loop)."""
        return [(status, self._groups[status.key].snapshot()) for status in self.status()]

    def retry_now(self, key: Hashable, topic: str, partition: int, offset: int) -> bool:
        """Group ``key``'s held message handed out again at once (False: not held there)."""
        group = self._groups.get(key)
        return group is not None and group.resolution.retry_now(topic, partition, offset)

    def pause_all(self) -> None:
        """Stop fetching in every group for good (shutdown): in-flight work still resolves."""
        for group in self._groups.values():
            group.flow_control.quiesce()

    def in_flight(self, key: Hashable) -> int:
        """Messages of group ``key`` in flight or held (0 if no such group)."""
        group = self._groups.get(key)
        return 0 if group is None else group.in_flight

    # -- running a watcher --------------------------------------------------------------

    async def run_watcher(self, watcher: str, trigger: Subscriber) -> None:
        """Subscribe and consume ``trigger.filter_shared_stream`` until the group stops
        (``filter_shared_batch`` instead when the trigger defines it: see ``core.batch``).

        Each yielded TriggerEvent is bound to the message being handled. A filter that
        raises (or overruns ``ack_timeout``) fails only this watcher for that message
        and is restarted with backoff while its siblings keep running. Returns when the
        group is stopped or the filter ends; raises :class:`GroupFailedError` when the
        group fails; leaves the group on the way out (also when cancelled).
        """
        call = batch_filter(trigger)
        group, stream = self._join(watcher, trigger)
        runner = (None if call is None
                  else BatchRunner(stream, group, call, self.settings, self.clock,
                                   value_preparer(trigger)))
        try:
            await self._drive(stream, trigger, runner)
        finally:
            await self._leave(group, stream)

    async def _drive(self, stream: SharedStream, trigger: Subscriber,
                     runner: BatchRunner | None) -> None:
        """Run the filter (``runner``'s batches for a batch watcher) and restart it."""
        loop = asyncio.get_running_loop()
        crashes = 0
        while True:
            progress_mark = stream.handed
            work = _consume(stream, trigger) if runner is None else runner.run()
            task = loop.create_task(work, name=watcher_task_name(stream.name))
            stuck = quiet = False
            hint: float | None = None  # InfrastructureError.retry_after

            def on_stuck(task: asyncio.Task[None] = task) -> None:
                nonlocal stuck
                stuck = True
                task.cancel()

            stream.on_stuck = on_stuck
            try:
                await task
            except GroupFailedError:
                raise
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if not stuck or (current is not None and current.cancelling()):
                    raise
                why = "ack timeout"
            except InfrastructureError as exc:
                stream.fail_open(exc)
                why = f"waiting on infrastructure ({type(exc).__name__}: {exc})"
                quiet = exc.reported
                hint = exc.retry_after
            except Exception as exc:
                stream.fail_open(exc)
                why = repr(exc)
                log.warning("watcher %r: filter raised %r", stream.name, exc,
                            exc_info=(type(exc), exc, exc.__traceback__),
                            extra={"watcher": stream.name})
            else:
                stream.moved_past()
                return
            finally:
                stream.on_stuck = None
            if stream.closed:
                return
            # Consecutive crashes without progress back off further; progress resets.
            crashes = 1 if stream.handed - progress_mark > 1 else crashes + 1
            delay = retry_delay(self.settings.backoff(crashes), hint)
            # An outage is no bug of the filter: no traceback; one whose source logs its
            # start and end (InfrastructureError.reported) adds nothing above DEBUG.
            log.log(logging.DEBUG if quiet else logging.WARNING,
                    "watcher %r: restarting its filter in %.3gs (%s, crash %d)", stream.name,
                    delay, why, crashes, extra={"watcher": stream.name})
            await self.clock.sleep(delay)
            if stream.closed:
                return


def _reason(group: Group) -> str | None:
    reason = group.flow_control.pause_reason
    return None if reason is None else reason.value


WATCHER_TASK = "watcher "
"""Prefix of the name of the task a watcher's filter runs in (``asyncio.Task.get_name``).

A watchdog off the loop (``triggerer.loopwatch``) reads the task running on a blocked
loop and names its watcher from this: the name is set once per filter run, so the hot
path pays nothing, and it stays right across the filter's own awaits."""


def watcher_task_name(watcher: str) -> str:
    return WATCHER_TASK + watcher


def task_watcher(task: asyncio.Task[Any] | None) -> str | None:
    """The watcher whose filter (or ``run()``) runs in ``task``; None for other tasks."""
    name = task.get_name() if task is not None else ""
    return name[len(WATCHER_TASK):] if name.startswith(WATCHER_TASK) else None


async def _consume(stream: SharedStream, trigger: Subscriber) -> None:
    bind = stream.bind_event
    events = trigger.filter_shared_stream(stream)
    try:
        async for event in events:
            if not isinstance(event, TriggerEvent):
                raise TypeError(f"filter_shared_stream of watcher {stream.name!r} yielded "
                                f"{type(event).__qualname__}, not TriggerEvent")
            bind(event)
    finally:
        await _aclose(events)


async def _aclose(events: Any) -> None:
    aclose = getattr(events, "aclose", None)
    if aclose is not None:
        await aclose()


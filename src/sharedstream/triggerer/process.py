"""``sharedstream run``'s running process: from its first message to a clean exit.

:mod:`sharedstream.triggerer.startup` holds the checks made before this runs (and the
start-up order); :mod:`sharedstream.triggerer.embedded` calls them, then this, behind
the public ``async with Triggerer(...)`` API, and ``run`` is a thin caller of that.

Shutdown (SIGTERM/SIGINT): stop fetching, let the units of work in flight commit,
hand resolved prefixes to the producers (dead letters delivered, offsets
committed), exit 0 -- all within ``shutdown_timeout``. A second signal exits at
once with code 1; what was not committed is read again by the next process
(at-least-once; events are idempotent, so nothing is duplicated).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry

from sharedstream import __version__
from sharedstream.airflowbridge.runtime import configure_airflow_instances
from sharedstream.core.backoff import jittered
from sharedstream.core.holds import HoldJournal
from sharedstream.core.manager import SharedStreamManager, watcher_task_name
from sharedstream.core.names import summarise
from sharedstream.core.streamconfig import GroupFailedError
from sharedstream.delivery.service import DeliveryService
from sharedstream.kafka.membership import FenceWatch, InstanceFencedError, StaticMembership
from sharedstream.kafka.runtime import KafkaRuntime, use_kafka_runtime
from sharedstream.kafka.topic_ids import TopicIdResolver
from sharedstream.serde.registries import (
    SchemaRegistries,
    registry_problems,
    use_schema_registries,
)
from sharedstream.statestore import StateStore
from sharedstream.statestore.engine import describe_error, is_transient_error
from sharedstream.triggerer.config import load_config
from sharedstream.triggerer.health import HealthServer
from sharedstream.triggerer.heartbeat import INTERVAL_S as HEARTBEAT_INTERVAL_S
from sharedstream.triggerer.heartbeat import Heartbeat, RetryRequest
from sharedstream.triggerer.loading import LoadedWatcher
from sharedstream.triggerer.logs import GroupNames
from sharedstream.triggerer.loopwatch import LoopWatchdog
from sharedstream.triggerer.metrics import TriggererCollector
from sharedstream.triggerer.plan import GroupPlan, Plan
from sharedstream.triggerer.progress import ProgressLog, fresh_lags
from sharedstream.triggerer.readiness import destination_problems
from sharedstream.triggerer.standalone import run_standalone
from sharedstream.triggerer.state_access import WatcherStateAccess
from sharedstream.triggerer.status import status_from_thread
from sharedstream.uow.holdstore import DatabaseHoldStore
from sharedstream.uow.rejections import DatabaseRejectionRecorder
from sharedstream.uow.sink import DatabaseWorkSink

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_FAILURE = 1
LAG_TIMEOUT_S = 5.0  # how long a progress line waits for the broker's offsets
E = TypeVar("E", bound=BaseException)


@dataclass(frozen=True, slots=True)
class RunOptions:
    takeover: bool = False
    upgrade: bool = False
    deliver: bool = True  # run the [destinations] beside ingestion


class TriggererRuntime:
    """The running process: manager, units of work, watcher tasks, health."""

    def __init__(self, plan: Plan, store: StateStore, asset_ids: dict[str, int], *,
                 topic_id_resolver: TopicIdResolver | None = None,
                 delivery: DeliveryService | None = None,
                 membership: StaticMembership | None = None) -> None:
        """``topic_id_resolver`` only for a cluster without ``describe_topics`` (the demo);
        ``delivery`` runs the destinations beside ingestion when given; ``membership``
        the groups' ``group.instance.id`` (triggerer/identity.py)."""
        self.plan = plan
        self.topic_id_resolver = topic_id_resolver
        self.membership = membership
        self._fences = FenceWatch()
        self.config = plan.config
        self.store = store
        self.asset_ids = asset_ids
        self.holds = HoldJournal({name: group.consumer_group for group in plan.groups
                                  for name in group.watchers})
        self.sink = DatabaseWorkSink(store, {w.name: asset_ids[w.asset.name]
                                             for w in plan.watchers}, self.config.process,
                                     holds=self.holds)
        self.recorder = DatabaseRejectionRecorder(store)
        self.manager = SharedStreamManager(self.sink, self.config.manager, holds=self.holds)
        self.stopping = False
        self._tasks: list[asyncio.Task[None]] = []
        self._state_access: list[WatcherStateAccess] = []
        self._fatal: BaseException | None = None
        self._stop = asyncio.Event()
        self.registry = CollectorRegistry()
        self.registry.register(TriggererCollector(self))
        self.health: HealthServer | None = None
        self.delivery = delivery
        self._delivery_stop = asyncio.Event()
        self.heartbeat: Heartbeat | None = None
        self.watchdog: LoopWatchdog | None = None
        self.group_names = GroupNames()
        self.registries: SchemaRegistries | None = None  # its own, set as it runs
        self.progress = ProgressLog({g.key: g.consumer_group for g in plan.groups}, 0.0, 0)
        self._started = 0.0

    @property
    def fatal(self) -> BaseException | None:
        """The error that stopped the process by itself, if one did."""
        return self._fatal

    def readiness(self) -> list[str]:
        """Why the process is not ready (empty = ready): cohort, broker, database."""
        reasons = ["shutting down"] if self.stopping else []
        running = {s.key: s for s in self.manager.status()}
        for group in self.plan.groups:
            status = running.get(group.key)
            if status is None:
                reasons.append(f"group {group.consumer_group}: not running")
                continue
            # A cohort member that left (its filter ended, it is being resubscribed) makes
            # the group not ready even though it keeps polling for the others.
            missing = sorted(status.cohort - status.present)
            if missing:
                reasons.append(f"group {group.consumer_group}: waiting for watchers {missing}")
            elif not status.polling:
                reasons.append(f"group {group.consumer_group}: not polling yet")
            if (problem := status.producer.health().problem()) is not None:
                reasons.append(f"group {group.consumer_group}: {problem}")
        if not self.sink.figures.healthy:
            reasons.append(f"database: {self.sink.figures.last_error or 'not answering'}")
        if self.delivery is not None:
            reasons += destination_problems(self.delivery)
        reasons += [f"database: watcher {a.watcher!r} waits for a state read ({a.read_failure})"
                    for a in self._state_access if a.read_failure is not None]
        if self.watchdog is not None:
            reasons += self.watchdog.problems()
        if self.registries is not None:  # read on the health server's thread: passed
            reasons += registry_problems(self.registries)
        return reasons

    async def run(self, stop: asyncio.Event) -> int:
        """Run until ``stop`` is set (or a fatal error); return the exit code."""
        self._stop = stop
        # Its own, in its task's context (inherited by every task it starts): another
        # triggerer of the process keeps its connections, recorder, hold store,
        # registries and static membership.
        use_kafka_runtime(KafkaRuntime(dict(self.config.connections), self.recorder,
                                       topic_id_resolver=self.topic_id_resolver,
                                       holds=DatabaseHoldStore(self.store),
                                       membership=self.membership))
        configure_airflow_instances(lambda path: load_config(path).airflow)
        self.registries = use_schema_registries(self.config.schema_registries)
        self.group_names.install({g.key: g.consumer_group for g in self.plan.groups})
        for group in self.plan.groups:
            self.manager.declare_cohort(group.key, [m.name for m in group.members],
                                        {m.name: getattr(m.trigger, "match", None)
                                         for m in group.members})
            log.info("group %s: %s%s", group.consumer_group, summarise(group.watchers),
                     self._member_text(group))
        for loaded in self.plan.watchers:
            access = WatcherStateAccess(self.store, loaded.name, loaded.asset,
                                        self.asset_ids[loaded.asset.name])
            loaded.trigger.asset_state_store = access
            self._state_access.append(access)
        self.sink.start()
        if self.delivery is not None:
            self.sink.on_commit.append(self.delivery.wakeup.notify)
            self._spawn(self.delivery.run(self._delivery_stop), name="delivery")
        process = self.config.process
        loop = asyncio.get_running_loop()
        self._started = loop.time()
        self.progress = ProgressLog({g.key: g.consumer_group for g in self.plan.groups},
                                    self._started, self.sink.figures.events_written)
        if process.progress_interval > 0 and self.plan.groups:
            self._spawn(self._report_progress(process.progress_interval), name="progress")
        self.watchdog = LoopWatchdog(loop, process.loop_block_timeout)
        self.watchdog.start()
        status_url = None
        if process.health_port >= 0:
            self.health = HealthServer(self.registry, self.readiness, process.health_host,
                                       process.health_port,
                                       status=lambda: status_from_thread(loop, self))
            self.health.start()
            log.info("health and metrics on http://%s:%d/ (livez, readyz, metrics, status)",
                     process.health_host, self.health.port)
            host = process.health_host
            if host in ("0.0.0.0", "::", ""):
                host = socket.gethostname()
            status_url = f"http://{host}:{self.health.port}/status"
        self.heartbeat = Heartbeat(self.store, version=__version__,
                                   watchers=self.plan.source.split(", "),
                                   groups=[g.consumer_group for g in self.plan.groups],
                                   status_url=status_url)
        self._spawn(self._beat(self.heartbeat), name="heartbeat")
        for group in self.plan.groups:
            for member in group.members:
                self._spawn(self._supervise_shared(member),
                            name=f"supervisor of watcher {member.name!r}")
        for loaded in self.plan.standalone:
            self._spawn(run_standalone(loaded, self.store, self.asset_ids[loaded.asset.name],
                                       self.config.manager), name=watcher_task_name(loaded.name))
        await stop.wait()
        code = EXIT_OK
        if self._fatal is not None:
            log.error("stopping after a fatal error: %r", self._fatal)
            code = EXIT_FAILURE
        try:
            await asyncio.wait_for(self._shutdown(), process.shutdown_timeout)
        except TimeoutError:
            log.error("shutdown did not finish within %.0fs; exiting (uncommitted messages "
                      "are read again by the next process)", process.shutdown_timeout)
            code = EXIT_FAILURE
        finally:
            self.group_names.uninstall()
        return code

    def _member_text(self, group: GroupPlan) -> str:
        """How the group's consumer joins: as which static member, if one."""
        if self.membership is None or group.connection_id is None:
            return ""
        found = self.membership.instance_id(group.consumer_group, group.connection)
        return "" if found is None else f", static member {found!r}"

    async def _report_progress(self, interval: float) -> None:
        """A progress line per group every ``interval`` seconds (``progress_interval``)."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval)
            try:
                statuses = self.manager.status()
                lags = await fresh_lags(statuses, min(interval, LAG_TIMEOUT_S))
                lines = self.progress.lines(statuses, loop.time(), self.sink.figures.events_written,
                                            lags)
            except Exception:  # a figure an adapter cannot give must not end the lines
                log.exception("progress line not written")
                continue
            for line in lines:
                log.info("%s", line)

    async def _beat(self, heartbeat: Heartbeat) -> None:
        """Keep this process's row alive; a failed beat is tried again next interval.

        A database outage only delays a beat (``/readyz`` names the outage already), so
        it is a debug line. Any other failure (a damaged table, a bug) would leave the
        row stale for good, the process missing from ``sharedstream web`` and ``held
        retry`` refused: an ``ERROR`` line with its traceback when the reason first
        appears. Every failure counts in ``sharedstream_heartbeat_failures_total``."""
        shown: str | None = None  # the reason last logged as an error
        while True:
            try:
                if heartbeat.registered:
                    self._retry_held(await self.store.run_async(heartbeat.beat))
                else:
                    await self.store.run_async(heartbeat.register)
            except Exception as exc:
                heartbeat.failures += 1
                reason = describe_error(exc)
                if is_transient_error(exc):
                    log.debug("heartbeat not written: %s", reason)
                elif reason != shown:
                    log.error("heartbeat not written: %s (tried again every %.0fs)", reason,
                              HEARTBEAT_INTERVAL_S, exc_info=exc)
                    shown = reason
            else:
                if shown is not None:
                    log.info("heartbeat written again")
                    shown = None
            await asyncio.sleep(HEARTBEAT_INTERVAL_S)

    def _retry_held(self, requests: Sequence[RetryRequest]) -> None:
        """Hand out at once the held messages an operator asked to retry (``held retry``)."""
        keys = {g.consumer_group: g.key for g in self.plan.groups}
        for r in requests:
            key = keys.get(r.consumer_group)
            done = key is not None and self.manager.retry_now(key, r.topic, r.partition,
                                                              r.offset)
            log.info("group %s: %s[%d]@%d %s", r.consumer_group, r.topic, r.partition,
                     r.offset, "handed out again at an operator's request" if done
                     else "not held any more: nothing to retry")

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        """Run ``coro`` for the life of the process, watched by :meth:`_task_ended`."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        task.add_done_callback(self._task_ended)
        self._tasks.append(task)

    def _task_ended(self, task: asyncio.Task[None]) -> None:
        """A task of :meth:`_spawn` ended: before shutdown that is a fatal error.

        Each task handles the failures it expects (the heartbeat and the deliverers
        retry, a watcher's group is rebuilt, a standalone trigger restarted), so one
        that ends anyway has met something none of them foresaw: restarting it blind
        could loop on the same error, and leaving it dead would stop its work behind a
        ready process. The process stops instead (exit 1; ``TriggererFailed`` for the
        embedded API), and the next start reads again what was not committed."""
        if self.stopping or (self._fatal is not None and self._stop.is_set()):
            return  # stopping already: what ends now ends because of it
        if task.cancelled():
            error: BaseException = RuntimeError(f"{task.get_name()} was cancelled")
        else:
            error = task.exception() or RuntimeError(f"{task.get_name()} returned")
        log.error("%s ended unexpectedly (%r): stopping", task.get_name(), error,
                  exc_info=None if task.cancelled() else task.exception())
        self._fatal = self._fatal or error
        self._stop.set()

    async def _supervise_shared(self, loaded: LoadedWatcher) -> None:
        """Keep one watcher subscribed: a failed group is rebuilt after a backoff; any
        other error (a group that cannot be built) is fatal, by :meth:`_task_ended`."""
        failures = 0
        while not self.stopping:
            try:
                await self.manager.run_watcher(loaded.name, loaded.trigger)
                failures = 0
                if self.stopping:
                    return
                log.warning("watcher %r: its filter ended; subscribing it again", loaded.name)
            except GroupFailedError as exc:
                fenced = _cause(exc, InstanceFencedError)
                if fenced is not None and self._fences.twin(fenced):
                    # Another live process has this identity: rejoining would fence it in
                    # turn, and it us, for ever. One fence is this process's own stale
                    # request after a lost session: rebuilt below (kafka/membership.py).
                    self._fatal = self._fatal or fenced
                    self._stop.set()
                    return
                failures += 1
                log.error("watcher %r: its group failed (%s); rejoining", loaded.name, exc)
            await asyncio.sleep(jittered(self.config.manager.backoff(max(failures, 1))))

    async def _shutdown(self) -> None:
        self.stopping = True
        self._delivery_stop.set()  # a round in flight finishes; the lease is given up
        self.manager.pause_all()
        await self.sink.drain(last=True)
        stopping = self.manager.status()  # in flight now: not committed, read again later
        await self.manager.stop_all()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.sink.aclose()
        if self.heartbeat is not None:
            try:
                await self.store.run_async(self.heartbeat.unregister)
            except Exception as exc:
                log.warning("heartbeat row not removed: %s", describe_error(exc))
        if self.health is not None:
            self.health.stop()
        if self.watchdog is not None:
            self.watchdog.stop()
        seconds = asyncio.get_running_loop().time() - self._started
        written = self.sink.figures.events_written
        for line in self.progress.stopped_lines(stopping, seconds, written):
            log.info("%s", line)


def _cause(exc: BaseException, kind: type[E]) -> E | None:
    """The first exception of type ``kind`` in ``exc``'s chain of causes, if any."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, kind):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


async def run_with_signals(run: Callable[[asyncio.Event], Awaitable[int]]) -> int:
    """Run ``run(stop)`` with SIGTERM/SIGINT setting ``stop`` (a second one exits at once)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals = 0

    def on_signal(signum: int) -> None:
        nonlocal signals
        signals += 1
        if signals == 1:
            log.info("%s: stopping (a second signal exits at once)",
                     signal.Signals(signum).name)
            stop.set()
        else:
            log.warning("second signal: exiting now")
            os._exit(EXIT_FAILURE)

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)
    return await run(stop)

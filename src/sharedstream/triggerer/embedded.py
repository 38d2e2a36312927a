"""The triggerer inside your own asyncio program: ``async with Triggerer(config, assets=...)``.

``sharedstream run`` is a thin caller of this class, so an embedded triggerer makes
the same checks in the same order (watchers, topics, database schema, recorded
watcher sets) and keeps the same guarantees: events and state commit together,
offsets move only past what is persisted, rejections reach the dead-letter topic
first.

Entering the block runs the start-up checks in a worker thread (they wait on the
broker and the database; the host's loop keeps serving) and raises what ``run``
reports as an ``error:`` line: :class:`StartupError` for a configuration that cannot
work, :class:`UnavailableError` for a broker or database that does not answer.
Leaving the block, normally, by an exception or by the host task being cancelled,
stops fetching, lets the units of work in flight commit and commits the offsets of
what they persisted, within ``[triggerer] shutdown_timeout``. What was not persisted
is read again by the next start: a cancelled service loses nothing, and since
events are keyed by their message, duplicates nothing.

A triggerer that stops by itself (a fatal error) cancels the host's block, as
``asyncio.TaskGroup`` cancels its body when a child fails, and leaving the block then
raises :class:`TriggererFailed` instead of the cancellation: a host busy with its own
work learns at once, not whenever it leaves the block. A host awaiting ``wait()`` is
not cancelled (it gets the exit code); a cancellation of its own is kept.

Several may run in one process: each sets its Kafka runtime (connections, rejection
recorder) and its schema registries in the context of its own task (``process.py``),
so another's never replace them. It installs no signal handlers (the host owns them).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from types import TracebackType

from sharedstream.kafka.membership import InstanceFencedError
from sharedstream.statestore import StateStore
from sharedstream.triggerer import process, startup
from sharedstream.triggerer.config import Config
from sharedstream.triggerer.gctune import tune_gc
from sharedstream.triggerer.group_starts import start_groups
from sharedstream.triggerer.identity import Identity, claim_identity
from sharedstream.triggerer.loading import WatcherLoadError, check_assets
from sharedstream.triggerer.plan import Plan, StartupError, UnavailableError, make_plan, plan_of
from sharedstream.triggerer.registration import register_assets
from sharedstream.triggerer.replay_topics import replay_topics
from sharedstream.triggers.assets import Asset

__all__ = ["StartupError", "Triggerer", "TriggererFailed", "UnavailableError",
           "run_triggerer"]

EMBEDDED_SOURCE = "embedded assets"


class TriggererFailed(RuntimeError):
    """The triggerer stopped by itself (a fatal error), or its shutdown overran
    ``shutdown_timeout``: what was not committed is read again by the next start."""


class Triggerer:
    """Run watchers from Python: an async context manager around the whole process.

    ``config`` is a :class:`~sharedstream.triggerer.config.Config` built in code
    (``Config(database=DatabaseSettings(url=...), connections={...})``) or loaded with
    ``load_config()``; ``assets`` are the :class:`~sharedstream.Asset` objects a
    watcher module would declare. ``takeover``, ``upgrade`` and ``deliver`` are
    ``run``'s ``--takeover``, ``--upgrade`` and the opposite of ``--no-delivery``.
    Bad assets raise :class:`StartupError` here, before anything connects.
    """

    def __init__(self, config: Config | None = None, *, assets: Iterable[Asset],
                 takeover: bool = False, upgrade: bool = False, deliver: bool = True) -> None:
        config = config if config is not None else Config()
        try:
            module = check_assets(EMBEDDED_SOURCE, list(assets))
        except WatcherLoadError as exc:
            raise StartupError(str(exc)) from None
        self._init(plan_of(config, module),
                   process.RunOptions(takeover=takeover, upgrade=upgrade, deliver=deliver))

    @classmethod
    def from_plan(cls, plan: Plan, options: process.RunOptions) -> Triggerer:
        """A triggerer on a plan already made (``sharedstream run``'s watcher modules)."""
        self = cls.__new__(cls)
        self._init(plan, options)
        return self

    def _init(self, plan: Plan, options: process.RunOptions) -> None:
        self.plan = plan
        self.options = options
        self.exit_code: int | None = None
        self._store: StateStore | None = None
        self._identity: Identity | None = None
        self._runtime: process.TriggererRuntime | None = None
        self._stop = asyncio.Event()
        self._task: asyncio.Task[int] | None = None
        self._host: asyncio.Task[object] | None = None  # the task inside the block
        self._host_waits = False  # the host awaits wait(): it gets the exit code instead
        self._host_cancelled = False  # cancelled by a fatal error: undone when it leaves

    @property
    def config(self) -> Config:
        return self.plan.config

    @property
    def failure(self) -> BaseException | None:
        """The error that stopped the triggerer by itself; None while it runs (or
        after a requested stop). A health check of the host can read it."""
        task = self._task
        if task is not None and task.done() and not task.cancelled() and task.exception():
            return task.exception()
        return self._runtime.fatal if self._runtime is not None else None

    def start_up(self) -> None:
        """Everything before the first message, blocking: topics checked, replay topics
        created, the database opened (migrated if empty), group watcher sets recorded,
        assets registered, destinations built. Raises StartupError / UnavailableError."""
        config, plan = self.config, self.plan
        startup.health_check(config.process)
        startup.check_topics(plan.groups, config.process.broker_timeout)
        for line in replay_topics(plan.groups, create=True,
                                  timeout=config.process.broker_timeout):
            process.log.info("%s", line)
        store = startup.connect(config, upgrade=self.options.upgrade)
        identity = None
        try:
            start_groups(plan.groups, store, config.process.broker_timeout,
                         takeover=self.options.takeover)
            asset_ids = register_assets(store, (w.asset for w in plan.watchers))
            delivery = None
            if self.options.deliver and config.destinations:
                delivery = startup.delivery_service(store, config)
            identity = claim_identity(config.process, [
                g.consumer_group for g in plan.groups if g.connection_id is not None])
        except BaseException:
            store.close()
            raise
        self._store = store
        self._identity = identity
        self._runtime = process.TriggererRuntime(plan, store, asset_ids, delivery=delivery,
                                          membership=identity.membership)

    async def run(self, stop: asyncio.Event) -> int:
        """Run the started triggerer until ``stop`` is set or a fatal error; the exit
        code (0 after a clean stop). ``sharedstream run`` calls this with its signals."""
        if self._runtime is None:
            raise RuntimeError("Triggerer.run() before start_up()")
        self.exit_code = await self._runtime.run(stop)
        return self.exit_code

    def close(self) -> None:
        """Release the database connections and this process's identity (after
        :meth:`run` returned)."""
        if self._store is not None:
            self._store.close()
            self._store = None
        if self._identity is not None:
            self._identity.release()
            self._identity = None

    async def __aenter__(self) -> Triggerer:
        if self._task is not None:
            raise RuntimeError("this Triggerer was already started; make a new one")
        await asyncio.to_thread(self.start_up)
        self._task = asyncio.get_running_loop().create_task(self.run(self._stop),
                                                            name="sharedstream-triggerer")
        self._host = asyncio.current_task()
        self._task.add_done_callback(self._ended)
        return self

    def _ended(self, task: asyncio.Task[int]) -> None:
        """The runtime task finished: if by a fatal error while the host is still busy
        in its block (not leaving it, not awaiting wait()), cancel the host."""
        host = self._host
        if host is None or host.done() or self._host_waits or self.failure is None:
            return
        self._host_cancelled = True
        host.cancel(f"sharedstream triggerer failed: {self.failure!r}")

    def stop(self) -> None:
        """Ask the triggerer to stop; leaving the ``async with`` block waits for it."""
        self._stop.set()

    async def wait(self) -> int:
        """Wait until the triggerer stops (after :meth:`stop`, or by a fatal error) and
        return its exit code; cancelling this wait leaves the triggerer running."""
        if self._task is None:
            raise RuntimeError("Triggerer.wait() outside its `async with` block")
        host = asyncio.current_task() is self._host
        self._host_waits = self._host_waits or host
        try:
            return await asyncio.shield(self._task)
        finally:
            if host:
                self._host_waits = False

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        """Stop and wait for the clean shutdown, even when the host task is being
        cancelled: the runtime runs in its own task, which the host's cancellation
        never reaches, and a further cancel during the (bounded) shutdown is taken
        after it, so what was persisted is always committed first. A cancellation
        that only a fatal error made becomes :class:`TriggererFailed`."""
        if self._task is None:
            return
        self._host = None  # leaving: a fatal error from now on is raised below, not a cancel
        self._stop.set()
        cancelled = False
        while not self._task.done():
            try:
                await asyncio.shield(self._task)
            except asyncio.CancelledError:
                if self._task.cancelled():
                    break
                cancelled = True
        self.close()
        ours = False
        if self._host_cancelled:
            self._host_cancelled = False
            current = asyncio.current_task()
            # Only our cancel pending, none of the host's own: take it back.
            ours = current is not None and current.uncancel() == 0 \
                and exc_type is asyncio.CancelledError
        if cancelled:
            raise asyncio.CancelledError
        if (exc_type is not None and not ours) or self._task.cancelled():
            return  # the block's own exception (or cancellation) goes on
        failure = self.failure
        if failure is not None:
            raise TriggererFailed(f"the triggerer stopped by itself: {failure!r}") from failure
        if self._task.result() != 0:
            raise TriggererFailed(f"the triggerer stopped with exit code {self.exit_code} "
                                  "(shutdown overran [triggerer] shutdown_timeout)")


def run_triggerer(config: Config, target: str | Sequence[str],
                  options: process.RunOptions) -> int:
    """The whole ``sharedstream run``: the embedded triggerer on watcher modules, started
    before the event loop (so a SIGTERM while starting is the CLI's clean exit), then
    run until a signal; the exit code."""
    triggerer = Triggerer.from_plan(make_plan(config, target), options)
    triggerer.start_up()
    try:
        tune_gc()  # start-up is done: freeze it out of the collections (see gctune)
        code = asyncio.run(process.run_with_signals(triggerer.run))
    finally:
        triggerer.close()
    if isinstance(triggerer.failure, InstanceFencedError):
        # Two processes claim one identity: the operator's to fix, like a bad setting.
        raise StartupError(str(triggerer.failure))
    return code

"""``sharedstream demo``: the real triggerer on an in-process Kafka and a temporary SQLite.

Nothing to install or configure: librdkafka's mock cluster runs inside this
process (it lives as long as the client that created it), the database is a
SQLite file in a fresh temporary directory, and the watchers are
:mod:`sharedstream.demo.watchers`. The triggerer is the same code ``sharedstream
run`` uses (plan, migrations, registration, topic check, units of work, manager,
Kafka producer); only two things are demo-specific, both because of the mock
cluster: topics are created by asking for their metadata (the mock cannot create
topics, it auto-creates them with its default partition count), and topic ids
are stable made-up strings (the mock cannot describe topics).

A simulated database outage makes every statement on the triggerer's engine fail
for a few seconds mid-run; the view shows offsets stop moving while events cannot
be persisted, and catch up once the database answers again. Later a fix is
"deployed" (orders without an amount become free orders) and the dead letters
rejected for a missing amount are replayed, as ``sharedstream dlq replay --reason
amount`` would: through the replay topic, to the watchers that rejected them, which
now turn them into events.

Logs (sharedstream's and librdkafka's) go to a file in the temporary directory,
kept after the run together with the database, so the view stays readable and
everything can be inspected afterwards.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from rich.console import Console
from sqlalchemy import event
from sqlalchemy.engine import Engine

from sharedstream.demo import view
from sharedstream.demo.observe import DemoSnapshot, Observer, TriggererState
from sharedstream.demo.traffic import Traffic
from sharedstream.demo.watchers import (
    CONNECTION,
    DLQ_TOPIC,
    FREE_ORDERS,
    MISSING_AMOUNT,
    REPLAY_TOPIC,
    TOPIC,
)
from sharedstream.ops.clitools import emit_json
from sharedstream.ops.dlq.replay import Replayer, ReplayRules, default_parking_topic
from sharedstream.triggerer.config import Config, DatabaseSettings, ProcessSettings
from sharedstream.triggerer.plan import make_plan
from sharedstream.triggerer.process import TriggererRuntime
from sharedstream.triggerer.registration import register_assets, register_groups
from sharedstream.triggerer.startup import check_topics, open_store

WATCHERS = "sharedstream.demo.watchers"
REFRESH_S = 0.25
# After the view's time is up, how long the remaining messages may take to be committed.
SETTLE_TIMEOUT_S = 15.0
JOIN_TIMEOUT_S = 30.0

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DemoOptions:
    """``seconds`` of view; an ``outage`` of that many seconds; orders per second."""

    seconds: float = 20.0
    outage: float = 4.0
    rate: float = 8.0
    keep: bool = False  # keep the temporary directory (database, log) after exit

    @property
    def traffic_seconds(self) -> float:
        """Traffic stops a little before the end, so the last commits show in the view."""
        return max(1.0, self.seconds - min(4.0, 0.3 * self.seconds))

    @property
    def outage_start(self) -> float:
        return 0.3 * self.seconds

    @property
    def outage_seconds(self) -> float:
        """The outage ends while traffic still flows, so the recovery is visible."""
        return max(0.0, min(self.outage, self.traffic_seconds - self.outage_start))

    @property
    def poison_at(self) -> tuple[float, ...]:
        return (0.2 * self.traffic_seconds, 0.5 * self.traffic_seconds)

    @property
    def fix_at(self) -> float:
        """When the fix is deployed and the missing-amount dead letters replayed."""
        return 0.75 * self.traffic_seconds


class FixAndReplay(threading.Thread):
    """Deploys the demo's fix, then replays the dead letters it fixes (``dlq replay``)."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(name="demo-replay", daemon=True)
        self._connection = {"bootstrap.servers": bootstrap, "log_level": 0}
        self.replayed = 0
        self.error: str | None = None

    def run(self) -> None:
        FREE_ORDERS.set()
        rules = ReplayRules(parking_topic=default_parking_topic(DLQ_TOPIC),
                            reasons=("amount",))
        try:
            summary = Replayer(self._connection, DLQ_TOPIC, rules,
                               group="sharedstream-demo-replay").run()
        except Exception as exc:
            self.error = str(exc)
            log.exception("demo: the replay failed")
            return
        self.replayed = summary.as_dict()["replayed"]
        log.info("demo: fix deployed, %d dead letter(s) replayed through %s", self.replayed,
                 REPLAY_TOPIC)


def mock_topic_ids(config: Mapping[str, Any], topics: Sequence[str]) -> dict[str, str]:
    """Stable ids for the mock cluster, which cannot answer ``describe_topics``."""
    return {topic: f"mock-{topic}" for topic in topics}


class MockCluster:
    """librdkafka's in-process mock cluster, alive while this object is open."""

    def __init__(self) -> None:
        self._owner = Producer({"test.mock.num.brokers": 1, "log_level": 0})
        broker = next(iter(self._owner.list_topics(timeout=10).brokers.values()))
        self.bootstrap = f"{broker.host}:{broker.port}"

    def create_topic(self, topic: str) -> int:
        """Auto-create ``topic`` with a metadata request; its partition count."""
        deadline = time.monotonic() + 10
        while True:
            metadata = self._owner.list_topics(topic, timeout=5).topics.get(topic)
            if metadata is not None and metadata.error is None and metadata.partitions:
                return len(metadata.partitions)
            if time.monotonic() > deadline:
                raise RuntimeError(f"the mock cluster did not create {topic!r}")
            time.sleep(0.1)

    def close(self) -> None:
        self._owner.flush(1)


class SimulatedOutage:
    """Every statement on ``engine`` fails while active, as a database that went away.

    The hook raises sqlite3's own ``OperationalError`` so SQLAlchemy wraps it as it
    would a real one; the triggerer cannot tell the difference.
    """

    def __init__(self, engine: Engine, start: float, duration: float) -> None:
        self.start = start
        self.duration = duration
        self.active = False
        self._closed = False
        self._engine = engine
        event.listen(engine, "before_cursor_execute", self._before_cursor_execute)

    def _before_cursor_execute(self, *args: Any) -> None:
        if self.active:
            raise sqlite3.OperationalError("unable to open database file (simulated outage)")

    def update(self, elapsed: float) -> None:
        if self._closed:
            return
        self.active = self.duration > 0 and self.start <= elapsed < self.start + self.duration

    def describe(self, elapsed: float) -> str:
        if self.duration <= 0:
            return "none"
        if elapsed < self.start:
            return f"starts in {self.start - elapsed:.0f}s"
        if self.active:
            return f"active, {elapsed - self.start:.1f}s of {self.duration:g}s"
        return f"over ({self.duration:g}s from t={self.start:.0f}s)"

    def close(self) -> None:
        self._closed = True
        self.active = False
        event.remove(self._engine, "before_cursor_execute", self._before_cursor_execute)


class TriggererThread(threading.Thread):
    """The triggerer's event loop on its own thread; the main thread keeps the view."""

    def __init__(self, triggerer: TriggererRuntime) -> None:
        super().__init__(name="demo-triggerer", daemon=True)
        self.triggerer = triggerer
        self.code: int | None = None
        self.error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._halt: asyncio.Event | None = None
        self._started = threading.Event()

    def run(self) -> None:
        try:
            self.code = asyncio.run(self._main())
        except BaseException as exc:
            self.error = exc
            log.exception("the triggerer failed")
        finally:
            self._started.set()

    async def _main(self) -> int:
        self._loop = asyncio.get_running_loop()
        self._halt = asyncio.Event()
        self._started.set()
        return await self.triggerer.run(self._halt)

    def state(self) -> TriggererState:
        """In-memory counts, read on the triggerer's loop (its structures are not locked)."""
        loop = self._loop
        if loop is None or not self.is_alive():
            return TriggererState()
        return asyncio.run_coroutine_threadsafe(self._state(), loop).result(timeout=2)

    async def _state(self) -> TriggererState:
        in_flight = queued = held = assigned = 0
        for status in self.triggerer.manager.status():
            in_flight += status.in_flight
            queued += status.queued
            snapshot = status.producer.health()
            held += snapshot.held_messages
            assigned += snapshot.assigned_partitions
        figures = self.triggerer.sink.figures
        return TriggererState(in_flight=in_flight, queued=queued, held=held, assigned=assigned,
                              database_healthy=figures.healthy, database_error=figures.last_error,
                              failed_commits=figures.failures)

    def stop(self) -> None:
        self._started.wait(10)
        if self._loop is not None and self._halt is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._halt.set)


@contextmanager
def _log_to(path: Path) -> Iterator[None]:
    """Send every log record to ``path`` only, for the duration (the view owns the screen)."""
    root = logging.getLogger()
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    saved_handlers, saved_level = root.handlers[:], root.level
    root.handlers = [handler]
    root.setLevel(logging.INFO)
    try:
        yield
    finally:
        root.handlers = saved_handlers
        root.setLevel(saved_level)
        handler.close()


def main(options: DemoOptions, *, as_json: bool) -> int:
    """The ``sharedstream demo`` command: view, then the summary; the exit code.

    With ``as_json`` the view goes to stderr and only the summary's JSON to stdout,
    so the output can be piped.
    """
    out = sys.stderr if as_json else sys.stdout
    # Piped, a line is never cut at 80 columns: the summary's paths and command are pasted.
    console = Console(stderr=as_json, width=None if out.isatty() else 200)
    summary = run_demo(options, console)
    if as_json:
        emit_json(summary)
    else:
        console.print(view.summary_table(summary))
        for line in view.summary_after(summary):
            console.print(line, soft_wrap=True, highlight=False, markup=False)
    code: int = summary["exit_code"]
    return code


def run_demo(options: DemoOptions, console: Console) -> dict[str, Any]:
    """Run the demo, showing it on ``console``; the summary (``exit_code`` included).

    Its directory (SQLite database, log) is removed when the run ends, Ctrl-C included,
    unless ``options.keep``: the summary's paths then name files that still exist.
    """
    workdir = Path(tempfile.mkdtemp(prefix="sharedstream-demo-"))
    log_file = workdir / "demo.log"
    try:
        with _log_to(log_file):
            summary = _run(options, console, workdir)
    finally:
        if not options.keep:
            shutil.rmtree(workdir)
    summary.update(log_file=str(log_file), kept=options.keep)
    return summary


def _run(options: DemoOptions, console: Console, workdir: Path) -> dict[str, Any]:
    cluster = MockCluster()
    try:
        FREE_ORDERS.clear()
        partitions = cluster.create_topic(TOPIC)
        cluster.create_topic(DLQ_TOPIC)
        cluster.create_topic(REPLAY_TOPIC)
        database_url = f"sqlite:///{workdir / 'demo.db'}"
        connection = {"bootstrap.servers": cluster.bootstrap,
                      "logger": logging.getLogger("librdkafka")}
        config = Config(database=DatabaseSettings(database_url),
                        process=ProcessSettings(health_port=-1, shutdown_timeout=15),
                        connections={CONNECTION: connection})
        plan = make_plan(config, WATCHERS)
        store = open_store(config, upgrade=False)
        try:
            asset_ids = register_assets(store, (w.asset for w in plan.watchers))
            register_groups(store, [g.declaration() for g in plan.groups], takeover=False)
            check_topics(plan.groups)
            observer = Observer(cluster.bootstrap, database_url, TOPIC, partitions, DLQ_TOPIC,
                                plan.groups[0].consumer_group)
            try:
                summary = _watch(options, console, TriggererRuntime(
                    plan, store, asset_ids, topic_id_resolver=mock_topic_ids),
                    cluster.bootstrap, partitions, observer)
            finally:
                observer.close()
        finally:
            store.close()
        summary.update(workdir=str(workdir), database_url=database_url, topic=TOPIC,
                       dlq_topic=DLQ_TOPIC, partitions=partitions,
                       consumer_group=plan.groups[0].consumer_group)
        return summary
    finally:
        cluster.close()


def _watch(options: DemoOptions, console: Console, triggerer: TriggererRuntime, bootstrap: str,
           partitions: int, observer: Observer) -> dict[str, Any]:
    """Traffic, outage and view while the triggerer runs; then a clean stop and the summary."""
    outage = SimulatedOutage(triggerer.store.engine, options.outage_start,
                             options.outage_seconds)
    traffic = Traffic(bootstrap, TOPIC, partitions, rate=options.rate,
                      duration=options.traffic_seconds, poison_at=options.poison_at)
    runner = TriggererThread(triggerer)
    runner.start()
    fix = FixAndReplay(bootstrap)
    started = time.monotonic()

    def snapshot() -> DemoSnapshot:
        elapsed = time.monotonic() - started
        outage.update(elapsed)
        return DemoSnapshot(elapsed=elapsed, produced=dict(traffic.delivered()),
                        committed=observer.committed(), events=observer.events(),
                        watermarks=observer.watermarks(),
                        dead_letters=list(observer.read_dead_letters()),
                        triggerer=runner.state(), outage=outage.describe(elapsed),
                        poison_sent=traffic.poison_sent, replay=replay_text(fix))

    interrupted = False
    try:
        with console.status("starting the triggerer: joining the consumer group"):
            _wait_for_assignment(runner)
        traffic.start()
        log.info("demo: traffic started")
        started = time.monotonic()
        with view.Display(console, options.seconds) as display:
            while runner.is_alive() and time.monotonic() - started < options.seconds:
                snap = snapshot()
                if (fix.ident is None and snap.elapsed >= options.fix_at
                        and any(MISSING_AMOUNT in d.rejections.values()
                                for d in snap.dead_letters)):
                    fix.start()
                display.show(snap)
                time.sleep(REFRESH_S)
            display.show(snapshot())
    except KeyboardInterrupt:
        interrupted = True
    finally:
        outage.close()
        traffic.stop()
        if traffic.ident is not None:
            traffic.join()
    if fix.ident is not None:
        fix.join(JOIN_TIMEOUT_S)
    if not interrupted:
        _settle(runner, observer, traffic)
    final_state = runner.state()
    log.info("demo: stopping the triggerer")
    runner.stop()
    runner.join(30)
    log.info("demo: the triggerer stopped (exit code %s)", runner.code)
    last = snapshot()
    summary = _summary(options, last, final_state, runner, outage, traffic, observer,
                       interrupted)
    summary["replay"] = {"fixed_at": round(options.fix_at, 1) if fix.ident else None,
                         "topic": REPLAY_TOPIC, "replayed": fix.replayed, "error": fix.error}
    if fix.error is not None:
        summary["exit_code"] = 1
    return summary


def replay_text(fix: FixAndReplay) -> str:
    """The fix-and-replay step as the view shows it."""
    if fix.ident is None:
        return "fix not deployed yet"
    if fix.error is not None:
        return f"replay failed: {fix.error}"
    if fix.is_alive():
        return "fix deployed (no amount = free order): replaying"
    return (f"fix deployed (no amount = free order): {fix.replayed} dead letter(s) replayed "
            f"through {REPLAY_TOPIC}")


def _wait_for_assignment(runner: TriggererThread) -> None:
    """Start the clock once the group owns its partitions (the mock takes ~3 s to balance),
    so the outage and the poison messages fall where the view can show them."""
    deadline = time.monotonic() + JOIN_TIMEOUT_S
    while runner.is_alive() and time.monotonic() < deadline:
        if runner.state().assigned:
            return
        time.sleep(0.1)


def _settle(runner: TriggererThread, observer: Observer, traffic: Traffic) -> None:
    """Wait (bounded) until every delivered message is committed."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    produced = dict(traffic.delivered())
    while runner.is_alive() and time.monotonic() < deadline:
        committed = observer.committed()
        if (all((committed.get(p) or 0) >= n for p, n in produced.items())
                and not observer.replays_pending(REPLAY_TOPIC)):
            return
        time.sleep(REFRESH_S)
    log.warning("not everything was committed within %.0fs", SETTLE_TIMEOUT_S)


def _summary(options: DemoOptions, last: DemoSnapshot, state: TriggererState,
             runner: TriggererThread, outage: SimulatedOutage, traffic: Traffic,
             observer: Observer, interrupted: bool) -> dict[str, Any]:
    paid_max: dict[str, int] = {}
    for partition, order in observer.event_payloads("paid_orders"):
        key = str(partition)
        paid_max[key] = max(paid_max.get(key, order["id"]), order["id"])
    watermarks = {name: dict(values) for name, values in last.watermarks.items()}
    failed = runner.error is not None or runner.code != 0
    return {
        "exit_code": 1 if failed else 0,
        "interrupted": interrupted,
        "seconds": round(last.elapsed, 1),
        "produced": {str(p): n for p, n in last.produced.items()},
        "committed": {str(p): n for p, n in last.committed.items()},
        "events": last.events,
        "watermarks": watermarks,
        "paid_orders_max_id": paid_max,
        "dlq": {
            "records": len(last.dead_letters),
            "reasons": [dict(d.rejections) for d in last.dead_letters],
            "last_reason": view.reason_text(last.dead_letters[-1]) if last.dead_letters else None,
        },
        "poison_sent": traffic.poison_sent,
        "database": {
            "outage_from": round(outage.start, 1),
            "outage_seconds": round(outage.duration, 1),
            "failed_commits": state.failed_commits,
            "outage_observed": state.failed_commits > 0,
            "recovered": state.database_healthy,
        },
        "in_flight_at_end": state.in_flight,
        "held_at_end": state.held,
    }

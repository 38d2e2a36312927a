"""Every figure of issue 8 in ONE run, on the real broker, PostgreSQL and SQLite.

    python -m bench [--quick] [--out bench/results]
    python -m bench --persistence [--quick]   # issue 28 only: see persistence()
    python -m bench --tracing [--quick]       # issue 31 only: bench/tracing_cost.py
    python -m bench --avro [--quick]          # issue 30 only: bench/avro_decode.py
    python -m bench --watchers-scale [--quick]  # issue 42 only: bench/watchers_scale.py

Services: ``KAFKA_BOOTSTRAP_SERVERS`` / ``SHAREDSTREAM_TEST_DATABASE_URL`` when set
(each PostgreSQL figure gets a fresh database created there), else a broker and a
server started with ``scripts/localservices`` for the run. Figures, side by side:

1. plain confluent-kafka ``consume()``: the ceiling every ratio refers to;
2. manager + Kafka producer, no persistence, 1/10/100 watchers on one consumer;
3. the same with the triggerer's ``DatabaseWorkSink`` on SQLite and PostgreSQL,
   10 watchers keeping 10% and 100% of the messages; plus the broker-less unit-of-work
   bench (``uow_throughput``) the acceptance target is stated against;
4. the pre-sharing model: 10 and 100 independent consumers, counting only and with
   each trigger's per-message work (decode, event, commit per batch);
5. end-to-end latency, produce timestamp -> event committed, at a fixed offered rate;
6. peak RSS, broker TCP connections and fetch requests of a subprocess running each
   setup (1 and 100 shared watchers, 1 and 100 independent consumers: the x1 runs give
   the per-watcher cost above a process's own);
7. state store: asset cursor writes/s (sync, async) and cleanup of expired rows with a
   concurrent writer's longest stall (``statestore_cleanup``);
8. issue 27 (``bench/issue27.py``): watchers parsing JSON and keeping 1% against
   independent consumers doing the same, and whole processes timed from their start to
   their last commit under several ``fetch.queue.backoff.ms``
   (``python -m bench --issue27`` runs only these);
9. issue 31 (``bench/tracing_cost.py``): events/s with tracing off, on at sampling 1.0
   and at 0.01, exporting to a real OpenTelemetry Collector (``python -m bench --tracing``
   runs only these);
10. issue 30 (``bench/avro_decode.py``): 1, 10 and 100 watchers sharing one Avro
    deserialiser against as many independent consumers each decoding Avro, on a real
    schema registry (``python -m bench --avro`` runs only these);
11. the peers (``bench/peers.py``): quixstreams, sentry-arroyo and faust-streaming beside
    plain confluent-kafka and sharedstream's two APIs, whole processes timed until their
    commits reach the log end (``python -m bench --peers`` runs only these; a peer not
    installed in ``--peer-python``'s environment is skipped, with a line saying so);
12. issue 42 (``bench/watchers_scale.py``): 1, 100, 1,000 and 10,000 watchers on one
    6-partition topic, each wanting its own key, with a match and with Python filters
    in both APIs, against a hand-written confluent-kafka router; ``sharedstream run``
    processes timed from their start to their commits at the log end, filter-side, RSS
    and start-up (``python -m bench --watchers-scale`` runs only these; not part of the
    full run: its Python-filter runs at 10,000 watchers take minutes).
13. start-up (``bench/startup.py``): ``sharedstream run`` with one watcher and plain
    confluent-kafka, each a process timed from ``Popen`` to its first message (``python
    -m bench --startup`` runs only these; not part of the full run).

Writes ``bench.json`` (every figure, ratios to the plain baseline, machine, targets),
``throughput.png``, ``latency_cdf.png`` and ``bench.md`` into ``--out``. The existing
bench modules do the measuring; this module only orchestrates and reports.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import confluent_kafka
import sqlalchemy as sa
from bench import (
    avro_decode,
    issue27,
    peers,
    persistence_reference,
    report,
    startup,
    statestore_cleanup,
    tracing_cost,
    uow_throughput,
    watchers_scale,
)
from bench import kafka_throughput as kt
from bench.report import compile_measured
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from sharedstream.core.batch import BatchWindow, MessageBatch
from sharedstream.core.message import KafkaMessage
from sharedstream.core.window import Window
from sharedstream.kafka.connections import resolve_connection
from sharedstream.kafka.producer import KafkaSharedStreamProducer
from sharedstream.kafka.runtime import kafka_runtime
from sharedstream.statestore import AssetScope, StateStore, Writer
from sharedstream.triggerer.config import ProcessSettings
from sharedstream.triggerer.gctune import tune_gc
from sharedstream.triggerer.persistence import DatabaseWorkSink, _Queued
from sharedstream.triggers.base import TriggerEvent

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from localservices import KafkaBroker, PostgresServer  # type: ignore[import-not-found]

RESULTS = Path(__file__).parent / "results"


@dataclass(frozen=True)
class Sizes:
    """Message counts of one run; ``--quick`` shrinks every one for a smoke run."""

    messages: int = 200_000  # plain and 1 watcher
    fanout: int = 20_000  # 10 and 100 watchers, independent consumers, footprint
    persisted: int = 20_000  # messages through the DatabaseWorkSink runs
    uow: int = 60_000  # broker-less unit-of-work bench
    rate: int = 2_000  # latency: offered messages/s ...
    seconds: float = 20.0  # ... for this long
    cursor_writes: int = 2_000
    cleanup_rows: int = 1_000_000
    cleanup_batch: int = 10_000
    traced: int = 50_000  # each tracing-cost run: a second or more even when off


QUICK = Sizes(messages=5_000, fanout=1_000, persisted=1_000, uow=2_000, rate=500,
              seconds=2.0, cursor_writes=100, cleanup_rows=20_000, cleanup_batch=5_000,
              traced=1_000)


# -- services ---------------------------------------------------------------------------------


class Services:
    """The broker and PostgreSQL of the run: from the environment, or started here."""

    def __init__(self, stack: contextlib.ExitStack) -> None:
        bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
        if not bootstrap:
            broker = KafkaBroker()
            broker.start()
            stack.callback(broker.stop)
            bootstrap = broker.bootstrap
        self.bootstrap: str = bootstrap
        self._pg_url = os.environ.get("SHAREDSTREAM_TEST_DATABASE_URL")
        self._server: Any = None
        if not self._pg_url:
            self._server = PostgresServer()
            self._server.start()
            stack.callback(self._server.stop)

    def postgres(self) -> str:
        """A fresh, empty PostgreSQL database: every figure starts from the same state."""
        if self._server is not None:
            return str(self._server.create_database("bench"))
        assert self._pg_url is not None
        name = f"bench_{uuid.uuid4().hex[:12]}"
        admin = sa.create_engine(self._pg_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as connection:
            connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
        admin.dispose()
        return sa.make_url(self._pg_url).set(database=name).render_as_string(hide_password=False)


@contextlib.contextmanager
def sqlite_url() -> Iterator[str]:
    with tempfile.TemporaryDirectory() as tmp:
        yield f"sqlite:///{Path(tmp) / 'bench.db'}"


# -- 3 and 5: the manager with the triggerer's persistence ------------------------------------


class KeepTrigger(kt.BenchTrigger):
    """Keeps every ``keep_every``-th message as one small event (the rest are filtered
    out and acked without a unit of work); records the produce timestamp in it."""

    keep_every = 1

    async def filter_shared_stream(
        self, stream: AsyncIterator[KafkaMessage]
    ) -> AsyncIterator[TriggerEvent]:
        keep = self.keep_every
        async for message in stream:
            if message.offset % keep == 0:
                yield TriggerEvent({"offset": message.offset, "ts": message.timestamp})


class KeepTenth(KeepTrigger):
    keep_every = 10


class KeepBatch(kt.BenchTrigger):
    """``KeepTrigger``'s events through the batch API: one ``filter_shared_batch`` call
    (one BatchWindow, one unit of work) per batch of up to 512 messages."""

    async def filter_shared_batch(self, batch: MessageBatch) -> None:
        emit = batch.emit
        for message in batch:
            emit(message, TriggerEvent({"offset": message.offset, "ts": message.timestamp}))



class Arrivals:
    """What a latency run's filter saw: for each message, the milliseconds from its produce
    timestamp to the filter holding it (the producer, the broker and the consumer's
    fetch: Kafka's share of the latency, before sharedstream's persistence starts)."""

    ms: list[float] = []

    @classmethod
    def record(cls, timestamp: int) -> None:
        cls.ms.append(time.time() * 1000 - timestamp)


class ArrivalKeep(KeepTrigger):
    """``KeepTrigger`` noting each message's arrival (latency runs only)."""

    async def filter_shared_stream(
        self, stream: AsyncIterator[KafkaMessage]
    ) -> AsyncIterator[TriggerEvent]:
        async for message in stream:
            Arrivals.record(message.timestamp)
            yield TriggerEvent({"offset": message.offset, "ts": message.timestamp})


class ArrivalKeepBatch(KeepBatch):
    """``KeepBatch`` noting each message's arrival (latency runs only)."""

    async def filter_shared_batch(self, batch: MessageBatch) -> None:
        for message in batch:
            Arrivals.record(message.timestamp)
            batch.emit(message, TriggerEvent({"offset": message.offset, "ts": message.timestamp}))


class TimedWorkSink(DatabaseWorkSink):
    """The triggerer's sink, noting its first submit (the start of a timed run) and, for
    every committed window, the time from the message's produce timestamp to the commit."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.first = 0.0
        self.latencies_ms: list[float] = []
        self.transactions_ms: list[float] = []  # each _write, first attempt to commit
        self.committed = threading.Event()  # set by the writer thread

    def submit(self, windows: list[Window]) -> None:  # type: ignore[override]
        if not self.first:
            self.first = time.perf_counter()
        super().submit(windows)

    def _write(self, batch: list[_Queued]) -> int:
        started = time.perf_counter()
        written = super()._write(batch)  # returns after the commit
        self.transactions_ms.append((time.perf_counter() - started) * 1000)
        now_ms = time.time() * 1000
        for q in batch:
            window = q.window
            if isinstance(window, BatchWindow):
                self.latencies_ms += [now_ms - payload.timestamp for payload, _ in window.parts]
            else:
                self.latencies_ms.append(now_ms - window.payload.timestamp)
        self.committed.set()
        return written


def persisting_sink(url: str, watchers: int,
                    settings: ProcessSettings | None = None) -> tuple[StateStore, TimedWorkSink]:
    store = StateStore.from_url(url)
    store.upgrade()
    assets = {f"w{i}": store.register_asset(f"bench_w{i}") for i in range(watchers)}
    return store, TimedWorkSink(store, assets, settings or ProcessSettings())


async def persisted(bootstrap: str, topic: str, messages: int, url: str, watchers: int,
                    trigger: type[kt.BenchTrigger]) -> dict[str, Any]:
    store, sink = persisting_sink(url, watchers)
    try:
        rate = await kt.shared(bootstrap, topic, messages, watchers, sink=sink, trigger=trigger)
        await sink.aclose()
    finally:
        store.close()
    seconds = messages * watchers / rate
    return {"deliveries_per_s": round(rate), "events": sink.events_written,
            "events_per_s": round(sink.events_written / seconds), "batches": sink.batches}


def p99(ordered: list[float]) -> float:
    """The 99th percentile of ``ordered`` (sorted, not empty), rounded to 0.1."""
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 1)


def steal_seconds() -> float:
    """CPU seconds the hypervisor gave other guests while this one wanted them, summed
    over every CPU since boot (``steal`` in ``/proc/stat``): the part of a latency
    spike that is the host's, not ours."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    return int(fields[8]) / os.sysconf("SC_CLK_TCK")


async def latency(bootstrap: str, url: str, rate: int, seconds: float,
                  settings: ProcessSettings | None = None,
                  trigger: type[kt.BenchTrigger] = ArrivalKeep) -> dict[str, Any]:
    """One watcher (``trigger``, one that notes ``Arrivals``) keeping everything,
    persisting to ``url``, fed at ``rate`` msg/s."""
    Arrivals.ms = []
    topic = f"bench-lat-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, kt.PARTITIONS, 1)])[topic].result(30)
    total = int(rate * seconds)
    store, sink = persisting_sink(url, 1, settings)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
    producer.produce(topic, b"warm-up", partition=0)  # waits in the topic until assigned
    producer.flush(10)

    def offer() -> None:
        """Paced in 10 ms ticks, each on schedule from the start (no drift)."""
        started = time.perf_counter()
        ticks = int(seconds * 100)
        for tick in range(ticks):
            for _ in range(total * (tick + 1) // ticks - total * tick // ticks):
                producer.produce(topic, b"x" * kt.SIZE)
            producer.poll(0)
            time.sleep(max(0.0, started + (tick + 1) / 100 - time.perf_counter()))
        producer.flush(30)

    async def start_offering() -> None:
        # The warm-up committed: the group is assigned and the path is warm.
        await asyncio.to_thread(sink.committed.wait, 120)
        await asyncio.to_thread(offer)

    feeder = asyncio.create_task(start_offering())
    stolen = steal_seconds()
    try:
        await kt.shared(bootstrap, topic, total + 1, 1, sink=sink, trigger=trigger)
        await feeder
        await sink.aclose()
    finally:
        store.close()
    stolen = steal_seconds() - stolen
    samples = sorted(sink.latencies_ms[1:])
    transactions = sorted(sink.transactions_ms[1:])
    return {"offered_per_s": rate, "seconds": seconds, "messages": len(samples),
            "arrival_p99_ms": p99(sorted(Arrivals.ms[1:])), "steal_s": round(stolen, 2),
            "transactions": len(transactions),
            "slowest_transaction_ms": round(transactions[-1], 1),
            "p50_ms": round(samples[len(samples) // 2], 1),
            "p99_ms": p99(samples),
            "max_ms": round(samples[-1], 1), "samples_ms": samples}


# -- 6: footprint of a setup, measured in a subprocess ----------------------------------------


def _broker_sockets(pid: int, port: int) -> int:
    """TCP connections of process ``pid`` to ``port``: its socket inodes (``/proc/<pid>/fd``)
    matched against the namespace's TCP table (``/proc/<pid>/net/tcp*``), which alone
    would list every process's sockets."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    count = 0
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                fields = line.split()
                remote_port = int(fields[2].rsplit(":", 1)[1], 16)
                if remote_port == port and fields[3] == "01" and fields[9] in inodes:
                    count += 1  # state 01 = ESTABLISHED
    return count


IDLE_SECONDS = 3.0  # the idle phase of a footprint probe: steady-state fetch requests


def _fetches(stats: str) -> int:
    """Fetch requests sent so far, from one librdkafka statistics document."""
    brokers = json.loads(stats).get("brokers", {})
    return sum(int(b.get("req", {}).get("Fetch", 0)) for b in brokers.values())


class FetchLog:
    """(time.perf_counter(), fetch requests so far) of one client, from each statistics
    document it emits."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, int]] = []

    def __call__(self, stats: str) -> None:
        self.samples.append((time.perf_counter(), _fetches(stats)))

    @property
    def total(self) -> int:
        return self.samples[-1][1] if self.samples else 0

    def rate(self, start: float, end: float) -> float:
        """Fetch requests per second from ``start`` to ``end``, between the first and the
        last statistics document inside (0 with fewer than two)."""
        inside = [(t, n) for t, n in self.samples if start <= t <= end]
        if len(inside) < 2:
            return 0.0
        (t0, n0), (t1, n1) = inside[0], inside[-1]
        return (n1 - n0) / (t1 - t0)


def idle_fetch_rate(logs: list[FetchLog], start: float, end: float) -> float:
    """Fetch requests per second of all ``logs`` together over an idle window, skipping its
    first half second (the last records' fetches)."""
    return sum(log.rate(start + 0.5, end) for log in logs)


class StatsProducer(KafkaSharedStreamProducer):
    """Logs librdkafka's fetch-request counts besides the usual metrics."""

    fetch_log = FetchLog()

    def _on_stats(self, text: str) -> None:
        super()._on_stats(text)
        StatsProducer.fetch_log(text)


class StatsTrigger(kt.BenchTrigger):
    @classmethod
    def create_shared_stream_producer(cls, kwargs: Mapping[str, Any]) -> StatsProducer:
        runtime = kafka_runtime()
        config = resolve_connection(kwargs["kafka_config_id"], runtime.connections)
        return StatsProducer(topics=kwargs["topics"], recorder=runtime.recorder,
                             config={**config, "statistics.interval.ms": 200},
                             connection_id=kwargs["kafka_config_id"])


def probe(mode: str, bootstrap: str, topic: str, messages: int, watchers: int) -> None:
    """Subprocess side: run one setup over ``topic``, print peak RSS, the most broker
    connections seen at once, and fetch requests (librdkafka statistics) as JSON."""
    port = int(bootstrap.rsplit(":", 1)[1])
    peak_connections = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak_connections
        while not done.wait(0.1):
            peak_connections = max(peak_connections, _broker_sockets(os.getpid(), port))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    idle = kt.Idle(IDLE_SECONDS)
    if mode == "shared":
        logs = [StatsProducer.fetch_log]
        asyncio.run(kt.shared(bootstrap, topic, messages, watchers, trigger=StatsTrigger,
                              idle=idle))
    else:
        logs = [FetchLog() for _ in range(watchers)]

        def with_stats(i: int) -> dict[str, Any]:
            return {"statistics.interval.ms": 200, "stats_cb": logs[i]}

        kt.independent(bootstrap, topic, messages, watchers, extra=with_stats, idle=idle)
    idle_rate = idle_fetch_rate(logs, idle.start, idle.start + idle.seconds)
    done.set()
    sampler.join()
    status = Path("/proc/self/status").read_text()
    hwm_kb = int(next(line for line in status.splitlines()
                      if line.startswith("VmHWM:")).split()[1])
    print(json.dumps({"rss_peak_mb": round(hwm_kb / 1024, 1),
                      "broker_connections": peak_connections,
                      "fetch_requests": sum(log.total for log in logs),
                      "idle_fetch_requests_per_s": round(idle_rate, 1)}))


def footprint(mode: str, bootstrap: str, topic: str, messages: int,
              watchers: int) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "bench", "--probe", mode, "--bootstrap", bootstrap,
         "--topic", topic, "--probe-messages", str(messages), "--watchers", str(watchers)],
        check=True, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
    return {"setup": mode, "watchers": watchers, **json.loads(out.stdout.splitlines()[-1])}


# -- 7: state store -----------------------------------------------------------------------------


async def cursor_writes(url: str, writes: int) -> dict[str, Any]:
    """Asset cursor advances per second: one after another (sync ``advance``), and from 8
    coroutines on 8 cursors at once (``aadvance``, on the store's threads)."""
    store = StateStore.from_url(url)
    store.upgrade()
    state = store.asset(AssetScope(name="cursors"), writer=Writer.api("bench"))
    started = time.perf_counter()
    for i in range(writes):
        state.advance("sync", i)
    sync_rate = writes / (time.perf_counter() - started)

    async def cursor(n: int) -> None:
        for i in range(writes // 8):
            await state.aadvance(f"async/{n}", i)

    started = time.perf_counter()
    await asyncio.gather(*(cursor(n) for n in range(8)))
    async_rate = 8 * (writes // 8) / (time.perf_counter() - started)
    store.close()
    return {"sync_writes_per_s": round(sync_rate), "async_writes_per_s": round(async_rate)}


# -- issue 28: persistence against the hand-written references --------------------------------


@dataclass(frozen=True)
class PersistenceSizes:
    messages: int = 100_000  # each throughput run
    runs: int = 3  # alternating runs of each side; medians reported
    rates: tuple[int, ...] = (20, 1_000, 5_000, 10_000)  # latency: offered msg/s ...
    seconds: float = 5.0  # ... each for this long
    cursors: int = 20_000  # units of work, one cursor advance each


# The two watcher APIs each throughput run measures: (key infix, trigger).
APIS: tuple[tuple[str, type[kt.BenchTrigger]], ...] = (("", KeepTrigger), ("_batch", KeepBatch))

QUICK_PERSISTENCE = PersistenceSizes(messages=5_000, runs=1, rates=(20, 1_000), seconds=1.0,
                                     cursors=1_000)


def persistence(services: Services, sizes: PersistenceSizes) -> dict[str, Any]:
    """Issue 28's figures in one run, on a PostgreSQL with fsync and synchronous_commit on:
    1 watcher keeping every message as an event against the hand-written references (the
    lean table the targets are judged on, and the same rows into sharedstream's schema;
    alternating, medians of ``runs``), once per message (``KeepTrigger``) and once per
    batch call (``KeepBatch``, the batch API); latency at several offered loads (the
    default group commit with either API, and the old fixed 50 ms batch delay beside
    them); and asset cursor writes per second in units of work."""
    bootstrap = services.bootstrap
    server = persistence_reference.DurablePostgres()
    server.start()
    try:
        probe_url = server.create_database("probe")
        durability = persistence_reference.settings(probe_url)
        log(f"bench PostgreSQL: {durability}")
        topic = kt.fill(bootstrap, sizes.messages)
        runs: dict[str, list[float]] = {k: [] for k in (
            "reference_postgresql", "reference_schema_postgresql",
            "reference_schema_2_writers_postgresql", "sharedstream_postgresql",
            "sharedstream_batch_postgresql", "reference_sqlite", "reference_schema_sqlite",
            "sharedstream_sqlite", "sharedstream_batch_sqlite")}
        # Every timed run starts on a server that has written out the runs before it
        # (see persistence_reference.checkpoint): the same disk serves SQLite's fsyncs.
        settled = functools.partial(persistence_reference.checkpoint, probe_url)
        for _ in range(sizes.runs):
            settled()
            runs["reference_postgresql"].append(persistence_reference.postgres(
                bootstrap, topic, sizes.messages, server.create_database("ref")))
            settled()
            runs["reference_schema_postgresql"].append(persistence_reference.postgres_schema(
                bootstrap, topic, sizes.messages, server.create_database("refschema")))
            settled()
            runs["reference_schema_2_writers_postgresql"].append(
                persistence_reference.postgres_schema_writers(
                    bootstrap, topic, sizes.messages, server.create_database("refwriters"), 2))
            for api, trigger in APIS:
                settled()
                result = asyncio.run(persisted(bootstrap, topic, sizes.messages,
                                               server.create_database("ss"), 1, trigger))
                runs[f"sharedstream{api}_postgresql"].append(result["events_per_s"])
            with tempfile.TemporaryDirectory() as tmp:
                settled()
                runs["reference_sqlite"].append(persistence_reference.sqlite(
                    bootstrap, topic, sizes.messages, Path(tmp) / "ref.db"))
                settled()
                runs["reference_schema_sqlite"].append(persistence_reference.sqlite_schema(
                    bootstrap, topic, sizes.messages, Path(tmp) / "refschema.db"))
            for api, trigger in APIS:
                settled()
                with sqlite_url() as lite:
                    result = asyncio.run(persisted(bootstrap, topic, sizes.messages, lite, 1,
                                                   trigger))
                runs[f"sharedstream{api}_sqlite"].append(result["events_per_s"])
            log(f"events/s: { {k: round(v[-1]) for k, v in runs.items()} }")
        medians = {k: round(sorted(v)[len(v) // 2]) for k, v in runs.items()}
        latencies = []
        for rate in sizes.rates:
            for label, settings, trigger in (
                    ("group commit", ProcessSettings(), ArrivalKeep),
                    ("group commit, batch API", ProcessSettings(), ArrivalKeepBatch),
                    ("fixed 50 ms delay", ProcessSettings(uow_max_delay=0.05), ArrivalKeep)):
                settled()
                began = persistence_reference.checkpoints(probe_url)
                lat = asyncio.run(latency(bootstrap, server.create_database("lat"), rate,
                                          sizes.seconds, settings, trigger))
                lat.pop("samples_ms")
                lat["checkpoints"] = persistence_reference.checkpoints(probe_url) - began
                latencies.append({"writer": label, **lat})
                log(f"latency {label} at {rate}/s: p50 {lat['p50_ms']} ms, "
                    f"p99 {lat['p99_ms']} ms")
        settled()
        cursor = asyncio.run(uow_throughput.run(server.create_database("uow"), sizes.cursors))
        log(f"cursor writes in units of work: {cursor['events_per_second']:,}/s")
    finally:
        server.stop()
    return {"postgresql": durability, "runs": {k: [round(x) for x in v] for k, v in runs.items()},
            "medians": medians, "latency": latencies, "cursor_writes_uow": cursor}


def persistence_markdown(result: dict[str, Any]) -> str:
    m, med = result["machine"], result["medians"]
    pg_ratio = med["sharedstream_postgresql"] / med["reference_postgresql"]
    lite_ratio = med["sharedstream_sqlite"] / med["reference_sqlite"]
    pg_batch = med["sharedstream_batch_postgresql"] / med["reference_postgresql"]
    lite_batch = med["sharedstream_batch_sqlite"] / med["reference_sqlite"]
    lines = [f"Machine: {m['nproc']} CPUs, load average at start "
             f"{m['load_average_at_start'][0]:.1f} (shared). PostgreSQL: "
             f"fsync={result['postgresql']['fsync']}, synchronous_commit="
             f"{result['postgresql']['synchronous_commit']}. Sizes: {result['sizes']}.", "",
             "| 1 watcher keeping every message | events/s (median) | runs |", "|---|---:|---|"]
    lines += [f"| {k} | {v:,} | {', '.join(f'{x:,}' for x in result['runs'][k])} |"
              for k, v in med.items()]
    schema = [(db, api, med[f"sharedstream{api}_{db}"] / med[f"reference_schema_{db}"])
              for db in ("postgresql", "sqlite") for api in ("", "_batch")]
    lines += ["", "Against the reference writing the same rows into sharedstream's own "
              "`asset_event` (its indexes, commit-ordered ids; not the issue's target): "
              + ", ".join(f"{db}{' batch API' if api else ''} {ratio:.2f}x"
                          for db, api, ratio in schema) + "."]
    writers = (med["reference_schema_2_writers_postgresql"]
               / med["reference_schema_postgresql"])
    lines += ["", "Several PostgreSQL writers: the same rows by hand on 2 connections, "
              f"reading on while they write, against 1 connection: {writers:.2f}x."]
    lines += ["", "| writer | offered msg/s | p50 ms | p99 ms | max ms | arrival p99 ms | "
              "transactions | slowest ms | checkpoints | steal s |", "|---" + "|---:" * 9 + "|"]
    lines += [f"| {r['writer']} | {r['offered_per_s']:,} | {r['p50_ms']} | {r['p99_ms']} | "
              f"{r['max_ms']} | {r['arrival_p99_ms']} | {r['transactions']:,} | "
              f"{r['slowest_transaction_ms']} | "
              f"{r['checkpoints']} | {r['steal_s']} |" for r in result["latency"]]
    lat = {(r["writer"], r["offered_per_s"]): r for r in result["latency"]}
    idle = lat[("group commit", min(r["offered_per_s"] for r in result["latency"]))]
    at5k = lat.get(("group commit", 5_000))
    at5k_batch = lat.get(("group commit, batch API", 5_000))
    cursors = result["cursor_writes_uow"]["events_per_second"]
    targets = [
        ("PostgreSQL events/s >= 0.8x reference", f"{pg_ratio:.2f}x", pg_ratio >= 0.8),
        ("the same, batch API", f"{pg_batch:.2f}x", pg_batch >= 0.8),
        ("SQLite events/s >= 0.8x reference", f"{lite_ratio:.2f}x", lite_ratio >= 0.8),
        ("the same, batch API", f"{lite_batch:.2f}x", lite_batch >= 0.8),
        ("p99 <= 20 ms at 5,000 msg/s", f"{at5k['p99_ms']} ms" if at5k else "not run",
         bool(at5k and at5k["p99_ms"] <= 20)),
        ("the same, batch API", f"{at5k_batch['p99_ms']} ms" if at5k_batch else "not run",
         bool(at5k_batch and at5k_batch["p99_ms"] <= 20)),
        (f"one message into an idle system <= 10 ms (p50 at {idle['offered_per_s']} msg/s)",
         f"{idle['p50_ms']} ms", idle["p50_ms"] <= 10),
        ("asset cursor writes in units of work >= 20,000/s", f"{cursors:,}/s",
         cursors >= 20_000),
    ]
    lines += ["", "| target | measured | reached |", "|---|---|---|"]
    lines += [f"| {t} | {v} | {'yes' if ok else 'NO'} |" for t, v, ok in targets]
    return "\n".join(lines) + "\n"


# -- the run ------------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    cpu = next((line.split(":", 1)[1].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    mem_kb = int(Path("/proc/meminfo").read_text().split()[1])
    return {"nproc": os.cpu_count(), "cpu": cpu, "ram_gb": round(mem_kb / 2**20, 1),
            "python": platform.python_version(), "platform": platform.platform(),
            "librdkafka": confluent_kafka.libversion()[0],
            "load_average_at_start": os.getloadavg()}


def log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def measure(services: Services, sizes: Sizes, peer_python: str = sys.executable
            ) -> dict[str, Any]:
    bootstrap = services.bootstrap
    topic = kt.fill(bootstrap, sizes.messages)
    fanout = kt.fill(bootstrap, sizes.fanout)
    persisted_topic = kt.fill(bootstrap, sizes.persisted)
    rows: list[dict[str, Any]] = []

    def row(kind: str, watchers: int, messages: int, rate: float, **more: Any) -> None:
        rows.append({"kind": kind, "watchers": watchers, "messages": messages,
                     "deliveries_per_s": round(rate),
                     "us_per_message": round(1e6 * watchers / rate, 2), **more})
        log(f"{kind} x{watchers}: {rate:,.0f} deliveries/s {more or ''}")

    # The ceiling is the noisiest figure (a fraction of a second of C code on a shared
    # machine): the median of three runs, all three recorded.
    plains = sorted(kt.plain(bootstrap, topic, sizes.messages) for _ in range(3))
    row("plain", 1, sizes.messages, plains[1], runs=[round(p) for p in plains])
    for n in (1, 10, 100):
        t, m = (topic, sizes.messages) if n == 1 else (fanout, sizes.fanout)
        row("shared", n, m, asyncio.run(kt.shared(bootstrap, t, m, n)))
    for n in (10, 100):
        row("independent", n, sizes.fanout, kt.independent(bootstrap, fanout, sizes.fanout, n))
        row("independent_filtered", n, sizes.fanout,
            kt.independent(bootstrap, fanout, sizes.fanout, n, filtered=True))
    for database in ("sqlite", "postgresql"):
        for trigger, kept in ((KeepTenth, "10%"), (KeepTrigger, "100%")):
            with sqlite_url() as lite:
                url = lite if database == "sqlite" else services.postgres()
                result = asyncio.run(persisted(bootstrap, persisted_topic, sizes.persisted,
                                               url, 10, trigger))
            rate = result.pop("deliveries_per_s")
            row(f"persisted_{database}_{kept}", 10, sizes.persisted, rate, **result)
    base = rows[0]["deliveries_per_s"]
    for r in rows:
        r["ratio_to_plain"] = round(r["deliveries_per_s"] / base, 4)

    uow = []
    for _ in range(2):  # noisy shared machine: two runs, both reported
        with sqlite_url() as lite:
            uow.append(asyncio.run(uow_throughput.run(lite, sizes.uow)))
        uow.append(asyncio.run(uow_throughput.run(services.postgres(), sizes.uow)))
        log(f"units of work: {uow[-2]['events_per_second']:,}/s SQLite, "
            f"{uow[-1]['events_per_second']:,}/s PostgreSQL")

    lat = asyncio.run(latency(bootstrap, services.postgres(), sizes.rate, sizes.seconds))
    log(f"latency at {sizes.rate}/s: p50 {lat['p50_ms']} ms, p99 {lat['p99_ms']} ms")

    foot = [footprint("shared", bootstrap, fanout, sizes.fanout, 1),
            footprint("shared", bootstrap, fanout, sizes.fanout, 100),
            footprint("independent", bootstrap, fanout, sizes.fanout, 1),
            footprint("independent", bootstrap, fanout, sizes.fanout, 100)]
    for f in foot:
        log(f"footprint {f}")

    store: dict[str, Any] = {}
    for database in ("sqlite", "postgresql"):
        with sqlite_url() as lite:
            url = lite if database == "sqlite" else services.postgres()
            store[f"cursor_{database}"] = asyncio.run(cursor_writes(url, sizes.cursor_writes))
        with sqlite_url() as lite:
            url = lite if database == "sqlite" else services.postgres()
            store[f"cleanup_{database}"] = statestore_cleanup.run(
                url, sizes.cleanup_rows, sizes.cleanup_batch)
        log(f"state store {database}: {store[f'cursor_{database}']} "
            f"{store[f'cleanup_{database}']}")
    return {"throughput": rows, "units_of_work": uow, "latency": lat, "footprint": foot,
            "statestore": store, "issue27": run_issue27(bootstrap, sizes),
            "tracing": run_tracing(bootstrap, sizes), "avro": run_avro(bootstrap, sizes),
            "peers": run_peers(bootstrap, sizes, peer_python)}


def run_watchers_scale(bootstrap: str, quick: bool) -> dict[str, Any]:
    messages, filters, counts = watchers_scale.sizes(quick)
    found = watchers_scale.measure(bootstrap, messages, filters, 1, counts)
    found["targets"] = watchers_scale.targets(found)
    return found


def run_issue27(bootstrap: str, sizes: Sizes) -> dict[str, Any]:
    found = issue27.measure(bootstrap, sizes.messages, sizes.fanout,
                            runs=1 if sizes == QUICK else 3)
    found["targets"] = issue27.targets(found)
    return found


def run_tracing(bootstrap: str, sizes: Sizes) -> dict[str, Any]:
    return tracing_cost.measure(bootstrap, sizes.traced, runs=1 if sizes == QUICK else 3)


def run_avro(bootstrap: str, sizes: Sizes) -> dict[str, Any]:
    return avro_decode.measure(bootstrap, sizes.fanout, runs=1 if sizes == QUICK else 3)


def run_peers(bootstrap: str, sizes: Sizes, peer_python: str) -> dict[str, Any]:
    return peers.measure(bootstrap, sizes.messages, runs=1 if sizes == QUICK else 3,
                         peer_python=peer_python)


def targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 8's acceptance targets, each with the measured figure and whether it holds."""
    by = {(r["kind"], r["watchers"]): r for r in result["throughput"]}
    foot = {(f["setup"], f["watchers"]): f for f in result["footprint"]}
    shared100, indep100 = foot[("shared", 100)], foot[("independent", 100)]
    shared1, indep1 = foot[("shared", 1)], foot[("independent", 1)]
    pg = [u["events_per_second"] for u in result["units_of_work"] if u["database"] != "sqlite"]
    lite = [u["events_per_second"] for u in result["units_of_work"]
            if u["database"] == "sqlite"]
    ratio = by[("shared", 1)]["ratio_to_plain"]
    fan = by[("shared", 100)]["deliveries_per_s"] / by[("independent", 100)]["deliveries_per_s"]
    fan_filtered = (by[("shared", 100)]["deliveries_per_s"]
                    / by[("independent_filtered", 100)]["deliveries_per_s"])
    conns = shared100["broker_connections"] / max(1, indep100["broker_connections"])
    fetch = shared100["fetch_requests"] / max(1, indep100["fetch_requests"])
    idle_fetch = (shared100["idle_fetch_requests_per_s"]
                  / max(0.1, indep100["idle_fetch_requests_per_s"]))
    memory = indep100["rss_peak_mb"] / shared100["rss_peak_mb"]
    # Above what one watcher (one consumer) costs: what 99 more add.
    per_watcher = ((indep100["rss_peak_mb"] - indep1["rss_peak_mb"])
                   / max(0.1, shared100["rss_peak_mb"] - shared1["rss_peak_mb"]))
    return [
        {"target": "1 watcher, no persistence >= 0.25x plain consume()",
         "measured": f"{ratio:.3f}x", "reached": ratio >= 0.25},
        {"target": "100 shared watchers >= 100 independent consumers (deliveries/s)",
         "measured": f"{fan:.2f}x", "reached": fan >= 1},
        {"target": "... against independent consumers running the same per-message work",
         "measured": f"{fan_filtered:.2f}x", "reached": fan_filtered >= 1},
        {"target": "... with <= 1/100 of the broker connections",
         "measured": f"{shared100['broker_connections']} vs "
                     f"{indep100['broker_connections']} ({conns:.3f})",
         "reached": conns <= 0.01},
        {"target": "... with <= 1/100 of the fetch requests",
         "measured": f"{shared100['fetch_requests']} vs {indep100['fetch_requests']} "
                     f"({fetch:.3f})", "reached": fetch <= 0.01},
        {"target": "... fetch requests per second, idle at the end of the log (steady state)",
         "measured": f"{shared100['idle_fetch_requests_per_s']} vs "
                     f"{indep100['idle_fetch_requests_per_s']} ({idle_fetch:.3f})",
         "reached": idle_fetch <= 0.01},
        {"target": "... with >= 10x less resident memory",
         "measured": f"{shared100['rss_peak_mb']} vs {indep100['rss_peak_mb']} MB "
                     f"({memory:.1f}x)", "reached": memory >= 10},
        {"target": "... counting only what 99 more watchers add (x100 minus x1)",
         "measured": f"{shared100['rss_peak_mb'] - shared1['rss_peak_mb']:.1f} vs "
                     f"{indep100['rss_peak_mb'] - indep1['rss_peak_mb']:.1f} MB "
                     f"({per_watcher:.1f}x)", "reached": per_watcher >= 10},
        {"target": "units of work, PostgreSQL, 10 watchers keeping 10%: >= 20,000 events/s",
         "measured": "-".join(f"{v:,}" for v in (min(pg), max(pg))), "reached": min(pg) >= 20_000},
        {"target": "units of work, SQLite: >= 5,000 events/s",
         "measured": "-".join(f"{v:,}" for v in (min(lite), max(lite))),
         "reached": min(lite) >= 5_000},
    ]


def markdown(result: dict[str, Any]) -> str:
    m = result["machine"]
    lines = [f"Machine: {m['nproc']} CPUs ({m['cpu']}), {m['ram_gb']} GB RAM, Python "
             f"{m['python']}, librdkafka {m['librdkafka']}; load average at start "
             f"{m['load_average_at_start'][0]:.1f}. Sizes: {result['sizes']}.", "",
             "| run | watchers | messages | deliveries/s | us/message | ratio to plain |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in result["throughput"]:
        extra = f" ({r['events_per_s']:,} events/s)" if "events_per_s" in r else ""
        lines.append(f"| {r['kind']}{extra} | {r['watchers']} | {r['messages']:,} | "
                     f"{r['deliveries_per_s']:,} | {r['us_per_message']:.2f} | "
                     f"{r['ratio_to_plain']:.3f} |")
    lines += ["", "| units of work (no broker, 10 watchers keeping 10%) | events/s | batches |",
              "|---|---:|---:|"]
    lines += [f"| {u['database']} | {u['events_per_second']:,} | {u['batches']} |"
              for u in result["units_of_work"]]
    lat, st = result["latency"], result["statestore"]
    lines += ["", "| figure | value |", "|---|---|",
              f"| latency, produce -> committed, {lat['offered_per_s']:,} msg/s for "
              f"{lat['seconds']:g} s (PostgreSQL) | p50 {lat['p50_ms']} ms, p99 "
              f"{lat['p99_ms']} ms, max {lat['max_ms']} ms |"]
    lines += [f"| footprint, {f['setup']} x{f['watchers']} | {f['rss_peak_mb']} MB peak RSS, "
              f"{f['broker_connections']} broker connections, {f['fetch_requests']:,} fetch "
              f"requests ({f['idle_fetch_requests_per_s']}/s idle) |"
              for f in result["footprint"]]
    for db in ("sqlite", "postgresql"):
        c, k = st[f"cursor_{db}"], st[f"cleanup_{db}"]
        lines += [f"| asset cursor writes/s, {db} | sync {c['sync_writes_per_s']:,}, async "
                  f"(8 cursors) {c['async_writes_per_s']:,} |",
                  f"| cleanup of {k['rows']:,} expired rows, batch "
                  f"{result['sizes']['cleanup_batch']:,}, {db} | {k['cleanup_seconds']} s, "
                  f"longest writer stall {k['writer_longest_stall_ms']} ms |"]
    lines += ["", "| acceptance target | measured | reached |", "|---|---|---|"]
    lines += [f"| {t['target']} | {t['measured']} | {'yes' if t['reached'] else 'NO'} |"
              for t in result["targets"]]
    return ("\n".join(lines) + "\n\n" + issue27.markdown(result["issue27"]) + "\n"
            + tracing_cost.markdown(result["tracing"]) + "\n"
            + avro_decode.markdown(result["avro"]) + "\n"
            + peers.markdown(result["peers"]))


def latency_chart(samples: list[float], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.plot(samples, [(i + 1) / len(samples) for i in range(len(samples))])
    ax.set_xscale("log")
    ax.set_xlabel("produce timestamp -> event committed (ms)")
    ax.set_ylabel("fraction of messages")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts: a smoke run")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--persistence", action="store_true",
                        help="only issue 28's figures: persistence against hand-written "
                             "references, on a PostgreSQL with fsync on")
    parser.add_argument("--issue27", action="store_true",
                        help="only issue 27's figures: JSON fan-out and processes timed "
                             "from their start, under several fetch settings")
    parser.add_argument("--tracing", action="store_true",
                        help="only issue 31's figures: events/s with tracing off, on at "
                             "sampling 1.0 and at 0.01, exporting to a real collector")
    parser.add_argument("--avro", action="store_true",
                        help="only issue 30's figures: 1/10/100 watchers sharing one Avro "
                             "deserialiser against as many independent consumers")
    parser.add_argument("--peers", action="store_true",
                        help="only the peers: quixstreams, sentry-arroyo and faust-streaming "
                             "beside plain confluent-kafka and sharedstream, whole processes")
    parser.add_argument("--watchers-scale", action="store_true",
                        help="only issue 42's figures: 1 to 10,000 watchers each wanting its "
                             "own key, with a match and with Python filters, against a "
                             "hand-written router")
    parser.add_argument("--startup", action="store_true",
                        help="only the start-up figures (bench/startup.py): `sharedstream "
                             "run` and plain confluent-kafka, process start to first message")
    parser.add_argument("--peer-python", default=sys.executable,
                        help="the Python whose environment holds the peers (the "
                             "bench-peers extra); default: this one")
    parser.add_argument("--probe", choices=("shared", "independent"), help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--probe-messages", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--watchers", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    compile_measured()
    tune_gc()  # as `sharedstream run` does once start-up is over
    if args.probe:
        probe(args.probe, args.bootstrap, args.topic, args.probe_messages, args.watchers)
        return
    if args.persistence:
        sized = QUICK_PERSISTENCE if args.quick else PersistenceSizes()
        found: dict[str, Any] = {"machine": machine(), "sizes": asdict(sized)}
        with contextlib.ExitStack() as stack:
            found.update(persistence(Services(stack), sized))
        report.write_part(args.out, "persistence", found, persistence_markdown(found))
        return
    sizes = QUICK if args.quick else Sizes()
    parts: dict[str, tuple[Any, Any]] = {  # one part alone: its run and its tables
        "issue27": (lambda b: run_issue27(b, sizes), issue27.markdown),
        "tracing": (lambda b: run_tracing(b, sizes), tracing_cost.markdown),
        "avro": (lambda b: run_avro(b, sizes), avro_decode.markdown),
        "peers": (lambda b: run_peers(b, sizes, args.peer_python), peers.markdown),
        "watchers_scale": (lambda b: run_watchers_scale(b, args.quick),
                           watchers_scale.markdown),
        "startup": (lambda b: startup.measure(b, 1 if args.quick else 5), startup.markdown),
    }
    for name, (run, tables) in parts.items():
        if getattr(args, name):
            with contextlib.ExitStack() as stack:
                found = {"machine": machine(), "sizes": asdict(sizes),
                         **run(Services(stack).bootstrap)}
            report.write_part(args.out, name, found, tables(found))
            return
    result: dict[str, Any] = {"machine": machine(), "sizes": asdict(sizes),
                              "partitions": kt.PARTITIONS, "message_bytes": kt.SIZE}
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        result.update(measure(Services(stack), sizes, args.peer_python))
    result["targets"] = targets(result)
    result["seconds"] = round(time.perf_counter() - started, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    lat = result["latency"]
    latency_chart(lat["samples_ms"], args.out / "latency_cdf.png",
                  f"End-to-end latency at {lat['offered_per_s']:,} msg/s (PostgreSQL)")
    kt.chart([r for r in result["throughput"] if r["kind"] in ("plain", "shared", "independent",
                                                                   "independent_filtered")],
             args.out / "throughput.png")
    # The raw samples only drew the chart; the JSON keeps their percentiles.
    samples = lat.pop("samples_ms")
    lat["cdf_ms"] = {p: samples[min(len(samples) - 1, len(samples) * p // 100)]
                     for p in range(0, 101, 5)}
    report.write_part(args.out, "bench", result, markdown(result))


if __name__ == "__main__":
    main()

"""Persistence against hand-written references, on a PostgreSQL with fsync on.

    python -m bench --persistence [--quick]

One watcher keeping every message as an event, through the manager and the
triggerer's unit of work, against a hand-written confluent-kafka + database-driver
reference doing the same (``bench/persistence_reference.py``), on PostgreSQL (its own
server, durability on) and SQLite; per message and through the batch API; latency at
several offered loads; asset cursor writes per second in units of work.
"""

from __future__ import annotations

import asyncio
import functools
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import kafka_throughput as kt
from bench import persistence_reference, uow_throughput
from bench.persisted import (
    ArrivalKeep,
    ArrivalKeepBatch,
    KeepBatch,
    KeepTrigger,
    latency,
    persisted,
)
from bench.services import Services, log, sqlite_url

from sharedstream.triggerer.config import ProcessSettings


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
    return {"sizes": asdict(sizes), "postgresql": durability,
            "runs": {k: [round(x) for x in v] for k, v in runs.items()},
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

"""The full run: every figure side by side, on the real broker, PostgreSQL and SQLite.

``python -m bench [--quick]`` runs this. Figures, side by side:

1. plain confluent-kafka ``consume()``: the ceiling every ratio refers to;
2. manager + Kafka producer, no persistence, 1/10/100 watchers on one consumer;
3. the same with the triggerer's ``DatabaseWorkSink`` on SQLite and PostgreSQL,
   10 watchers keeping 10% and 100% of the messages; plus the broker-less unit-of-work
   bench (``uow_throughput``) the acceptance target is stated against;
4. the pre-sharing model: 10 and 100 independent consumers, counting only and with
   each trigger's per-message work (decode, event, commit per batch);
5. end-to-end latency, produce timestamp -> event committed, at a fixed offered rate;
6. peak RSS, broker TCP connections and fetch requests of a subprocess running each
   setup (``bench/footprint.py``);
7. state store: asset cursor writes/s (sync, async) and cleanup of expired rows with a
   concurrent writer's longest stall (``statestore_cleanup``);
8. JSON fan-out and whole processes timed from their start (``bench/json_fanout.py``);
9. the cost of tracing (``bench/tracing_cost.py``);
10. Avro decoded once for many watchers (``bench/avro_decode.py``);
11. the peers (``bench/peers.py``): quixstreams, sentry-arroyo and faust-streaming beside
    plain confluent-kafka and sharedstream's two APIs.

Writes ``bench.json`` (every figure, ratios to the plain baseline, machine, targets),
``throughput.png``, ``latency_cdf.png`` and ``bench.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import (
    avro_decode,
    cursor_writes,
    json_fanout,
    peers,
    report,
    statestore_cleanup,
    tracing_cost,
    uow_throughput,
)
from bench import kafka_throughput as kt
from bench.footprint import footprint
from bench.persisted import KeepTenth, KeepTrigger, latency, persisted
from bench.services import Services, log, machine, sqlite_url


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
            store[f"cursor_{database}"] = asyncio.run(cursor_writes.run(url, sizes.cursor_writes))
        with sqlite_url() as lite:
            url = lite if database == "sqlite" else services.postgres()
            store[f"cleanup_{database}"] = statestore_cleanup.run(
                url, sizes.cleanup_rows, sizes.cleanup_batch)
        log(f"state store {database}: {store[f'cursor_{database}']} "
            f"{store[f'cleanup_{database}']}")
    return {"throughput": rows, "units_of_work": uow, "latency": lat, "footprint": foot,
            "statestore": store, "json_fanout": run_json_fanout(bootstrap, sizes),
            "tracing": run_tracing(bootstrap, sizes), "avro": run_avro(bootstrap, sizes),
            "peers": run_peers(bootstrap, sizes, peer_python)}


def run_json_fanout(bootstrap: str, sizes: Sizes) -> dict[str, Any]:
    found = json_fanout.measure(bootstrap, sizes.messages, sizes.fanout,
                            runs=1 if sizes == QUICK else 3)
    found["targets"] = json_fanout.targets(found)
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
    return ("\n".join(lines) + "\n\n" + json_fanout.markdown(result["json_fanout"]) + "\n"
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


def run(sizes: Sizes, out: Path, peer_python: str = sys.executable) -> None:
    """Everything, then ``bench.json``, ``bench.md`` and the two charts into ``out``."""
    result: dict[str, Any] = {"machine": machine(), "sizes": asdict(sizes),
                              "partitions": kt.PARTITIONS, "message_bytes": kt.SIZE}
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        result.update(measure(Services(stack), sizes, peer_python))
    result["targets"] = targets(result)
    result["seconds"] = round(time.perf_counter() - started, 1)
    out.mkdir(parents=True, exist_ok=True)
    lat = result["latency"]
    latency_chart(lat["samples_ms"], out / "latency_cdf.png",
                  f"End-to-end latency at {lat['offered_per_s']:,} msg/s (PostgreSQL)")
    kt.chart([r for r in result["throughput"] if r["kind"] in ("plain", "shared", "independent",
                                                                   "independent_filtered")],
             out / "throughput.png")
    # The raw samples only drew the chart; the JSON keeps their percentiles.
    samples = lat.pop("samples_ms")
    lat["cdf_ms"] = {p: samples[min(len(samples) - 1, len(samples) * p // 100)]
                     for p in range(0, 101, 5)}
    report.write_part(out, "bench", result, markdown(result))

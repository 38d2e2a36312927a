"""The cost of tracing: events/s with tracing off, on at sampling 1.0 and at 0.01.

Part of ``python -m bench`` (``python -m bench --tracing`` runs only this). One watcher
keeps every message of a filled topic as an event, through the manager and the
triggerer's ``DatabaseWorkSink`` on SQLite (``bench/persisted.py``), so
each event costs a ``sharedstream.watch`` span and its ``sharedstream.uow.commit`` child
when sampled. The spans go over OTLP/HTTP to the real collector of the tests
(``tools/otelcol``, started here on loopback), through the SDK's batch span processor
with its default queue: what a deployment that sets ``OTEL_TRACES_EXPORTER=otlp`` gets.

Each run is its own process (``python -m bench.tracing_cost --run MODE``): tracing is
configured once per process, from the ``OTEL_*`` environment, as ``sharedstream run``
does. The sampler is ``parentbased_traceidratio`` (the records carry no
``traceparent``, so the ratio decides). The modes alternate, ``runs`` times each;
medians are reported, with every run. Beside events/s, each run reports the spans the
collector received (the batch processor drops spans when its queue is full, which
makes a run cheaper than a full export) and the collector's CPU seconds, spent on the
same two cores as the run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

from bench import kafka_throughput as kt

MODES = ("off", "1.0", "0.01")
ROOT = Path(__file__).resolve().parents[1]
RUN_TIMEOUT = 300.0  # one run takes seconds; far more means it hangs


def _run(mode: str, bootstrap: str, topic: str, messages: int, endpoint: str,
         service: str) -> dict[str, Any]:
    """This process's side: one timed run with tracing as ``mode`` says."""
    from bench.persisted import KeepTrigger, persisted
    from bench.services import sqlite_url

    from sharedstream import tracing
    from sharedstream.triggerer.gctune import tune_gc

    if mode != "off":
        os.environ.update({"OTEL_TRACES_EXPORTER": "otlp",
                           "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
                           "OTEL_SERVICE_NAME": service,
                           "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
                           "OTEL_TRACES_SAMPLER_ARG": mode})
        if not tracing.configure():
            raise RuntimeError("tracing did not turn on: is the tracing extra installed?")
    tune_gc()
    with sqlite_url() as url:
        result = asyncio.run(persisted(bootstrap, topic, messages, url, 1, KeepTrigger))
    tracing.shutdown(60.0)  # after the timing: what is queued still reaches the collector
    return result


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _timed_run(mode: str, bootstrap: str, topic: str, messages: int, endpoint: str,
               service: str) -> dict[str, Any]:
    """One run in its own process; a run that fails or hangs (RUN_TIMEOUT) stops the
    bench with that process's own output."""
    argv = [sys.executable, "-m", "bench.tracing_cost", "--run", mode, "--bootstrap",
            bootstrap, "--topic", topic, "--messages", str(messages), "--endpoint", endpoint,
            "--service", service]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT,
                             timeout=RUN_TIMEOUT, check=False)
    except subprocess.TimeoutExpired as hung:
        # Always bytes here, text=True or not.
        err = hung.stderr.decode(errors="replace") if isinstance(hung.stderr, bytes) else ""
        raise RuntimeError(f"tracing {mode}: no result after {RUN_TIMEOUT:.0f}s; its "
                           f"output:\n{err[-4000:]}") from None
    if out.returncode != 0:
        raise RuntimeError(f"tracing {mode}: exit {out.returncode}:\n{out.stderr[-4000:]}")
    found: dict[str, Any] = json.loads(out.stdout.splitlines()[-1])
    return found


def measure(bootstrap: str, messages: int, runs: int) -> dict[str, Any]:
    """Every mode ``runs`` times, alternating, against one collector and one topic."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from localservices.otelcol import OtlpCollector

    topic = kt.fill(bootstrap, messages)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        collector = OtlpCollector(Path(tmp))
        collector.start()
        try:
            pid = collector.process.pid
            assert pid is not None
            for round_ in range(runs):
                for mode in MODES:
                    service = f"bench-tracing-{uuid.uuid4().hex[:8]}"
                    cpu = _cpu_seconds(pid)
                    found = _timed_run(mode, bootstrap, topic, messages, collector.endpoint,
                                       service)
                    spans = [s for s in collector.spans() if s.resource["service.name"] == service]
                    rows.append({"mode": mode, "round": round_, **found,
                                 "spans": len(spans),
                                 "collector_cpu_s": round(_cpu_seconds(pid) - cpu, 2)})
                    print(f"tracing {mode}: {found['events_per_s']:,} events/s, "
                          f"{len(spans):,} spans", file=sys.stderr, flush=True)
        finally:
            collector.stop()
    medians = {mode: round(statistics.median(r["events_per_s"] for r in rows
                                             if r["mode"] == mode)) for mode in MODES}
    return {"messages": messages, "runs": rows, "medians": medians,
            "ratio_to_off": {mode: round(medians[mode] / medians["off"], 3) for mode in MODES}}


def _each(runs: list[dict[str, Any]], key: str) -> str:
    return ", ".join(f"{run[key]:,}" for run in runs)


def markdown(found: dict[str, Any]) -> str:
    lines = [f"1 watcher keeping each of {found['messages']:,} messages as an event, "
             "SQLite, spans over OTLP/HTTP to a collector on the same machine.", "",
             "| tracing | events/s (median) | ratio to off | runs | spans received | "
             "collector CPU s |", "|---|---:|---:|---|---|---|"]
    for mode in MODES:
        runs = [r for r in found["runs"] if r["mode"] == mode]
        label = "off" if mode == "off" else f"on, sampling {mode}"
        lines.append(
            f"| {label} | {found['medians'][mode]:,} | {found['ratio_to_off'][mode]:.3f} | "
            f"{_each(runs, 'events_per_s')} | {_each(runs, 'spans')} | "
            f"{_each(runs, 'collector_cpu_s')} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.tracing_cost",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--run", choices=MODES, required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--messages", type=int, required=True)
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--service", required=True)
    args = parser.parse_args()
    print(json.dumps(_run(args.run, args.bootstrap, args.topic, args.messages, args.endpoint,
                          args.service)))


if __name__ == "__main__":
    main()

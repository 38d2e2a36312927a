"""Footprint of a setup, measured in a subprocess: peak RSS, broker connections, fetches.

``footprint()`` runs ``python -m bench.footprint --probe MODE ...`` (this module) and
reads the JSON line it prints: 1 and 100 shared watchers against 1 and 100 independent
consumers over one topic (the x1 runs give the per-watcher cost above a process's own),
with the fetch requests per second once the topic is drained (idle).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench import kafka_throughput as kt

from sharedstream.kafka.connections import resolve_connection
from sharedstream.kafka.producer import KafkaSharedStreamProducer
from sharedstream.kafka.runtime import kafka_runtime

ROOT = Path(__file__).resolve().parents[1]


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
        [sys.executable, "-m", "bench.footprint", "--probe", mode, "--bootstrap", bootstrap,
         "--topic", topic, "--probe-messages", str(messages), "--watchers", str(watchers)],
        check=True, capture_output=True, text=True, cwd=ROOT)
    return {"setup": mode, "watchers": watchers, **json.loads(out.stdout.splitlines()[-1])}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.footprint",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--probe", choices=("shared", "independent"), required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--probe-messages", type=int, required=True)
    parser.add_argument("--watchers", type=int, required=True)
    args = parser.parse_args()
    from sharedstream.triggerer.gctune import tune_gc

    tune_gc()  # as `sharedstream run` does once start-up is over
    probe(args.probe, args.bootstrap, args.topic, args.probe_messages, args.watchers)


if __name__ == "__main__":
    main()

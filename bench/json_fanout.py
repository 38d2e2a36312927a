"""JSON fan-out, and whole processes timed from their start to their last commit.

Part of ``python -m bench`` (``bench/full_run.py`` runs it; ``python -m bench --json-fanout`` runs
only this). On the real broker, every topic holding the ~120-byte JSON orders of
``bench/decode_once.py`` (1% of them ``"status": "paid"``):

1. fan-out, in this process (``kafka_throughput``'s timing: first delivery to last):
   1, 10 and 100 watchers on one shared consumer, each parsing JSON and keeping the 1%
   paid orders, through the shared ``msg.json`` (``shared_json``) and parsing the bytes
   itself (``shared_loads``), both per message (``filter_shared_stream``), and through
   the batch API (``filter_shared_batch``, ``shared_batch_json``); beside them as many
   independent confluent-kafka consumers doing the same parse and keep, committing each
   batch (``independent_json``).
2. processes, timed from ``Popen`` until the broker acknowledged the commit of the
   last message (so start-up, imports, group join and the final commit all count),
   plain confluent-kafka against sharedstream's manager doing the same work:
   * 1 watcher / 1 consumer parsing and keeping nothing, under each
     ``fetch.queue.backoff.ms`` of ``BACKOFFS`` (1000 is librdkafka's default), the
     same value on both sides; and sharedstream with no override (its own default);
   * 10 watchers / 10 consumers parsing and keeping 1%, with the tuned setting
     (``TUNED``: sharedstream's default, chosen from the sweep above);
   * the batch API's two cases under the tuned setting: 1 watcher keeping nothing, and
     10 watchers keeping 1%.
   Each also reports its start-up (``Popen`` to its first delivered message) and its CPU
   seconds per wall-clock second (1.0: one core busy throughout; the rest was waiting).
   The plain side is ``bench/plain_consumer.py``, which imports nothing of sharedstream;
   the shared side is this module run as ``python -m bench.json_fanout`` (the manager and the
   Kafka adapter, no database: fewer imports than ``sharedstream run``).
   The runs alternate plain and shared; medians of ``runs``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from bench import kafka_throughput as kt
from bench.decode_once import value

import sharedstream
from sharedstream.core.batch import MessageBatch
from sharedstream.core.message import KafkaMessage
from sharedstream.kafka.connections import FETCH_QUEUE_BACKOFF_MS
from sharedstream.triggerer.gctune import tune_gc
from sharedstream.triggers.base import TriggerEvent

BACKOFFS = (1000, 100, 50, 10)
TUNED = {"fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS}  # the best of BACKOFFS
PAID = 100  # value(i) is paid for every 100th i: the 1% kept


class JsonKeep(kt.BenchTrigger):
    """Keeps the paid orders, reading the value through the shared ``msg.json``."""

    async def filter_shared_stream(
        self, stream: AsyncIterator[KafkaMessage]
    ) -> AsyncIterator[TriggerEvent]:
        async for message in stream:
            if message.json["status"] == "paid":
                yield TriggerEvent(message.offset)


class LoadsKeep(kt.BenchTrigger):
    """The same, each watcher parsing the bytes itself (as filters did before decode once)."""

    async def filter_shared_stream(
        self, stream: AsyncIterator[KafkaMessage]
    ) -> AsyncIterator[TriggerEvent]:
        async for message in stream:
            assert message.value is not None
            if json.loads(message.value)["status"] == "paid":
                yield TriggerEvent(message.offset)


class FirstCallSink(kt.ConfirmingSink):
    """A batch run's start is its first call, not its first unit of work (which comes
    only after a whole batch): ``BatchJsonKeep`` marks it."""

    current: FirstCallSink | None = None


class BatchJsonKeep(kt.BenchTrigger):
    """``JsonKeep`` through the batch API: one call per batch, events bound per message."""

    async def filter_shared_batch(self, batch: MessageBatch) -> None:
        sink = FirstCallSink.current
        if sink is not None and not sink.first:
            sink.first = time.perf_counter()
        for message in batch:
            if message.json["status"] == "paid":
                batch.emit(message, TriggerEvent(message.offset))


async def shared_batch(bootstrap: str, topic: str, messages: int, watchers: int) -> float:
    sink = FirstCallSink.current = FirstCallSink()
    try:
        return await kt.shared(bootstrap, topic, messages, watchers, sink=sink,
                               trigger=BatchJsonKeep)
    finally:
        FirstCallSink.current = None


class Timed(kt.BenchTrigger):
    """Process runs: notes the first message delivered (outside the loop: no per-message
    cost), parses every value through ``msg.json``, keeps the 1% paid when ``keep``."""

    keep = True
    first = 0.0

    async def filter_shared_stream(
        self, stream: AsyncIterator[KafkaMessage]
    ) -> AsyncIterator[TriggerEvent]:
        it = aiter(stream)
        message = await anext(it)
        if not Timed.first:
            Timed.first = time.time()
        while True:
            if message.json["status"] == "paid" and self.keep:
                yield TriggerEvent(message.offset)
            try:
                message = await anext(it)
            except StopAsyncIteration:
                return


class TimedDrop(Timed):
    keep = False


class TimedBatch(kt.BenchTrigger):
    """``Timed`` through the batch API."""

    keep = True

    async def filter_shared_batch(self, batch: MessageBatch) -> None:
        if not Timed.first:
            Timed.first = time.time()
        keep = self.keep
        for message in batch:
            if message.json["status"] == "paid" and keep:
                batch.emit(message, TriggerEvent(message.offset))


class TimedBatchDrop(TimedBatch):
    keep = False


def keep_paid(batch: list[Any]) -> object:
    """An independent consumer's work per batch: what ``JsonKeep`` does per message."""
    return [TriggerEvent(m.offset()) for m in batch if json.loads(m.value())["status"] == "paid"]


def fanout(bootstrap: str, messages: int, fanout_messages: int) -> list[dict[str, Any]]:
    """Part 1: deliveries/s of shared watchers (two ways) and independent consumers."""
    big = kt.fill(bootstrap, messages, value)
    small = kt.fill(bootstrap, fanout_messages, value)
    rows = []
    for n in (1, 10, 100):
        topic, m = (big, messages) if n == 1 else (small, fanout_messages)
        rates = {
            "shared_json": asyncio.run(kt.shared(bootstrap, topic, m, n, trigger=JsonKeep)),
            "shared_loads": asyncio.run(kt.shared(bootstrap, topic, m, n, trigger=LoadsKeep)),
            "shared_batch_json": asyncio.run(shared_batch(bootstrap, topic, m, n)),
            "independent_json": kt.independent(bootstrap, topic, m, n, work=keep_paid),
        }
        for kind, rate in rates.items():
            rows.append({"kind": kind, "watchers": n, "messages": m,
                         "deliveries_per_s": round(rate),
                         "us_per_delivery": round(1e6 / rate, 3)})
        log(f"fan-out x{n}: { {k: round(v) for k, v in rates.items()} }")
    return rows


# -- part 2: processes --------------------------------------------------------------------


def child(bootstrap: str, topic: str, messages: int, watchers: int, keep: bool,
          config: dict[str, Any], batch: bool = False) -> dict[str, float]:
    """In the timed process: the manager consumes ``topic`` to its end and commits; the
    wall-clock times of the first delivered message and of the broker's answer to the
    last commit, and the CPU seconds then (``bench/plain_consumer.py`` is the other side)."""
    marks: dict[str, float] = {}
    kind = ((TimedBatch if keep else TimedBatchDrop) if batch
            else (Timed if keep else TimedDrop))
    asyncio.run(kt.shared(bootstrap, topic, messages, watchers, trigger=kind, config=config,
                          marks=marks))
    return {"first": Timed.first, **marks}


def process_run(mode: str, bootstrap: str, topic: str, messages: int, consumers: int,
                keep: bool, config: dict[str, Any]) -> dict[str, float]:
    """One timed process: deliveries/s from its start to its last commit, and start-up."""
    root = Path(__file__).resolve().parents[1]
    src = str(Path(sharedstream.__file__).resolve().parents[1])  # the code measured here
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    command = ([sys.executable, str(root / "bench" / "plain_consumer.py"), bootstrap, topic,
                str(messages), str(consumers), "1" if keep else "0", json.dumps(config)]
               if mode == "plain" else
               [sys.executable, "-m", "bench.json_fanout", "--bootstrap", bootstrap, "--topic",
                topic,
                "--messages", str(messages), "--watchers", str(consumers),
                "--config", json.dumps(config)] + (["--keep"] if keep else [])
               + (["--batch"] if mode == "batch" else []))
    started = time.time()
    out = subprocess.run(command, check=True, capture_output=True, text=True, env=env,
                         cwd=root)
    marks = json.loads(out.stdout.splitlines()[-1])
    wall = marks["committed"] - started
    return {"per_s": consumers * messages / wall, "startup_s": marks["first"] - started,
            "cpu_per_wall": marks["cpu_s"] / wall}


def processes(bootstrap: str, messages: int, runs: int) -> dict[str, Any]:
    """Part 2: the backoff sweep with 1 watcher keeping nothing, sharedstream's own
    default, and 10 watchers keeping 1% with the tuned setting; medians of ``runs``."""
    one = kt.fill(bootstrap, messages, value)
    ten_messages = max(1_000, messages // 4)
    ten = kt.fill(bootstrap, ten_messages, value)
    cases: list[tuple[str, str, str, int, int, bool, dict[str, Any]]] = []
    for backoff in BACKOFFS:
        for mode in ("plain", "shared"):
            cases.append((f"{mode} x1 keep nothing, fetch.queue.backoff.ms={backoff}", mode,
                          one, messages, 1, False, {"fetch.queue.backoff.ms": backoff}))
    cases.append((f"shared x1 keep nothing, sharedstream's default "
                  f"({FETCH_QUEUE_BACKOFF_MS})", "shared", one, messages, 1, False, {}))
    for mode in ("plain", "shared"):
        cases.append((f"{mode} x10 keep 1%, tuned", mode, ten, ten_messages, 10, True, TUNED))
    cases.append(("batch x1 keep nothing, tuned", "batch", one, messages, 1, False, TUNED))
    cases.append(("batch x10 keep 1%, tuned", "batch", ten, ten_messages, 10, True, TUNED))
    found: dict[str, list[dict[str, float]]] = {case[0]: [] for case in cases}
    for _ in range(runs):  # alternating: each round runs every case once
        for label, mode, topic, count, consumers, keep, config in cases:
            found[label].append(process_run(mode, bootstrap, topic, count, consumers, keep,
                                            config))
            last = found[label][-1]
            log(f"process {label}: {last['per_s']:,.0f}/s, start-up "
                f"{last['startup_s']:.2f} s, {last['cpu_per_wall']:.2f} cores busy")
    rows = [{"case": label, "messages": case[3], "consumers": case[4],
             "per_s": round(statistics.median(r["per_s"] for r in found[label])),
             "startup_s": round(statistics.median(r["startup_s"] for r in found[label]), 3),
             "cpu_per_wall": round(statistics.median(r["cpu_per_wall"]
                                                     for r in found[label]), 2),
             "runs_per_s": [round(r["per_s"]) for r in found[label]]}
            for case in cases for label in [case[0]]]
    return {"runs": runs, "tuned": TUNED, "rows": rows}


def batch_overhead_us() -> float:
    """``bench/manager_overhead.py``'s framework cost per delivery, 100 watchers keeping
    nothing through the batch API (best of three)."""
    from bench.manager_overhead import run_once

    messages = 20_000
    best = min(asyncio.run(run_once(100, messages, False, batch=True)) for _ in range(3))
    return best / messages / 100 * 1e6


def measure(bootstrap: str, messages: int, fanout_messages: int, runs: int) -> dict[str, Any]:
    return {"fanout": fanout(bootstrap, messages, fanout_messages),
            "processes": processes(bootstrap, messages, runs),
            "batch_overhead_us": round(batch_overhead_us(), 3)}


def targets(found: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 27's targets against these figures."""
    fan = {(r["kind"], r["watchers"]): r["deliveries_per_s"] for r in found["fanout"]}
    proc = {r["case"]: r for r in found["processes"]["rows"]}
    tuned = TUNED["fetch.queue.backoff.ms"]
    plain1 = proc[f"plain x1 keep nothing, fetch.queue.backoff.ms={tuned}"]
    shared1 = proc[f"shared x1 keep nothing, fetch.queue.backoff.ms={tuned}"]
    plain10, shared10 = proc["plain x10 keep 1%, tuned"], proc["shared x10 keep 1%, tuned"]
    r100 = fan[("shared_json", 100)] / fan[("independent_json", 100)]
    b100 = fan[("shared_batch_json", 100)] / fan[("independent_json", 100)]
    r10 = shared10["per_s"] / plain10["per_s"]
    b10 = proc["batch x10 keep 1%, tuned"]["per_s"] / plain10["per_s"]
    r1 = shared1["per_s"] / plain1["per_s"]
    b1 = proc["batch x1 keep nothing, tuned"]["per_s"] / plain1["per_s"]
    overhead = found.get("batch_overhead_us")
    return [
        {"target": "100 watchers, batch API >= 1.5x 100 independent consumers",
         "measured": f"{b100:.2f}x", "reached": b100 >= 1.5},
        {"target": "100 watchers, per-message API (msg.json) >= 1.0x 100 independent "
                   "consumers doing the same parse and keep",
         "measured": f"{r100:.2f}x", "reached": r100 >= 1.0},
        {"target": "10 watchers, batch API >= 1.5x plain's 10 consumers (processes)",
         "measured": f"{b10:.2f}x", "reached": b10 >= 1.5},
        {"target": "10 watchers, per-message API >= 1.0x plain's 10 consumers (processes, "
                   "start to last commit)", "measured": f"{r10:.2f}x", "reached": r10 >= 1.0},
        {"target": "1 watcher, batch API, keeping nothing >= 0.9x plain, same tuned fetch "
                   "settings", "measured": f"{b1:.2f}x (per-message API {r1:.2f}x)",
         "reached": b1 >= 0.9},
        {"target": "start-up to first fetch <= 0.5 s (1 watcher)",
         "measured": f"{shared1['startup_s']:.2f} s (plain {plain1['startup_s']:.2f} s)",
         "reached": shared1["startup_s"] <= 0.5},
        {"target": "framework cost per delivery, 100 watchers, batch API <= 0.3 us",
         "measured": "not measured in this run" if overhead is None else f"{overhead:.2f} us",
         "reached": overhead is not None and overhead <= 0.3},
    ]


def markdown(found: dict[str, Any]) -> str:
    lines = ["| fan-out (in process) | watchers | messages | deliveries/s | us/delivery |",
             "|---|---:|---:|---:|---:|"]
    lines += [f"| {r['kind']} | {r['watchers']} | {r['messages']:,} | "
              f"{r['deliveries_per_s']:,} | {r['us_per_delivery']} |" for r in found["fanout"]]
    lines += ["", f"| process, start to last commit (median of {found['processes']['runs']}) "
                  "| messages x consumers | deliveries/s | start-up s | CPU s / wall s | runs |",
              "|---|---:|---:|---:|---:|---|"]
    lines += [f"| {r['case']} | {r['messages']:,} x {r['consumers']} | {r['per_s']:,} | "
              f"{r['startup_s']} | {r['cpu_per_wall']} | "
              f"{', '.join(f'{x:,}' for x in r['runs_per_s'])} |"
              for r in found["processes"]["rows"]]
    lines += ["", "| issue 27 target | measured | reached |", "|---|---|---|"]
    lines += [f"| {t['target']} | {t['measured']} | {'yes' if t['reached'] else 'NO'} |"
              for t in found["targets"]]
    return "\n".join(lines) + "\n"


def log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--messages", type=int, required=True)
    parser.add_argument("--watchers", type=int, default=1)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--batch", action="store_true", help="watchers use the batch API")
    parser.add_argument("--config", default="{}")
    args = parser.parse_args()
    tune_gc()  # as `sharedstream run` does once start-up is over
    print(json.dumps(child(args.bootstrap, args.topic, args.messages, args.watchers,
                           args.keep, json.loads(args.config), args.batch)))


if __name__ == "__main__":
    main()

"""Issue 42's figures: 1 to 10,000 watchers on one consumer, each wanting its own key.

    PYTHONPATH=src python -m bench.watchers_scale --bootstrap HOST:PORT [--quick]

Part of ``python -m bench`` (``--watchers-scale`` runs only this). For each N of
``COUNTS``, a 6-partition topic keyed ``0``..``N-1`` (the JSON orders of
``bench/decode_once.py``); N watchers, watcher i wanting the messages keyed ``i`` (1/N
of the topic), parsing each with ``json.loads`` and keeping nothing. The sides:

* ``match-batch`` / ``match-stream``: each watcher declares ``match={"key": [i]}``, its
  filter (batch API / per-message API) parses what it is routed;
* ``filter-batch`` / ``filter-stream``: no match; each filter tests the key in Python
  and parses its own (every watcher is handed every message: today's way);
* ``router``: a hand-written confluent-kafka consumer (``bench/router_consumer.py``)
  routing each message to its key's handler by one dict lookup.

The sharedstream sides are real ``sharedstream run`` processes (a generated watcher
module, a SQLite state store already at the schema head, sharedstream's own fetch
defaults; the router gets the same fetch setting). Each run is timed from ``Popen``
until its consumer group's committed offsets, read from outside, reach the log end
(``start_to_committed``); ``filter_side`` is the messages over the time from the first
message a filter handled to the last (marked when the filters' count reaches the topic's
messages: at 10,000 watchers a call is about one message, and two clock reads in every
call, one of them a system call, were work the router does once per consumed batch);
start-up is ``Popen`` to the first message a filter handled; the commit tail is the last
message a filter handled to its commits seen at the log end (polled every 20 ms); CPU
(µs per message) and peak RSS are the process's own (``/proc``), read when its commits
reached the end;
filter-side CPU is the process's CPU (every thread) from the first message a filter
handled to the last, per message: the measure that holds on a loaded machine, where
wall-clock rates are the machine's.

The Python-filter sides hand every message to every watcher, so at 1,000 and 10,000
watchers they run on a smaller topic (``filter_messages``). Their cost per watcher per
message is the filter-side CPU over N (``watcher_us``); the filters' own work in it (a
loop testing each message's key, a parse for the one in N that matches: 0.05 µs per
message alone on this machine) is timed in the same run (:func:`own_cost_us`: the same
loop over the same messages, without the framework), and the framework's cost is the
rest (``framework_us``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench import report
from bench.decode_once import value
from bench.json_fanout import TUNED
from bench.peers import CommitWatch, cpu_seconds
from bench.process_runs import COMMAND
from bench.services import compile_measured
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

import sharedstream

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
COUNTS = (1, 100, 1_000, 10_000)
PARTITIONS = 6
SIDES = ("router", "match-batch", "match-stream", "filter-batch", "filter-stream")
DEADLINE_S = 900.0
POLL_S = 0.02

WATCHERS = '''
import atexit, json, os, time
from sharedstream import Asset, AssetWatcher, KafkaSharedStreamTrigger

TOPIC, N, SIDE = os.environ["BENCH_TOPIC"], int(os.environ["BENCH_N"]), os.environ["BENCH_SIDE"]
TOTAL = int(os.environ["BENCH_MESSAGES"])  # each message is wanted by exactly one watcher
MARKS = {"first": 0.0, "last": 0.0, "cpu_first": 0.0, "cpu_last": 0.0, "handled": 0}
atexit.register(lambda: open(os.environ["BENCH_MARKS"], "w").write(json.dumps(MARKS)))


class Keyed(KafkaSharedStreamTrigger):
    """Wants the messages keyed ``want``: its match says so, or its filter tests it."""

    def __init__(self, *, want, **kwargs):
        super().__init__(**kwargs)
        self.want = want
        self.key = want.encode()

    def serialize(self):
        path, kwargs = super().serialize()
        return path, {**kwargs, "want": self.want}


class MatchBatch(Keyed):
    async def filter_shared_batch(self, batch):
        if not MARKS["first"]:
            MARKS["first"], MARKS["cpu_first"] = time.time(), time.process_time()
        for msg in batch:
            json.loads(msg.value)
        MARKS["handled"] += len(batch)
        if MARKS["handled"] >= TOTAL:
            MARKS["last"], MARKS["cpu_last"] = time.time(), time.process_time()


class FilterBatch(Keyed):
    async def filter_shared_batch(self, batch):
        key, handled = self.key, 0
        for msg in batch:
            if msg.key == key:
                if not MARKS["first"]:
                    MARKS["first"], MARKS["cpu_first"] = time.time(), time.process_time()
                json.loads(msg.value)
                handled += 1
        if handled:
            MARKS["handled"] += handled
            if MARKS["handled"] >= TOTAL:
                MARKS["last"], MARKS["cpu_last"] = time.time(), time.process_time()


class MatchStream(Keyed):
    async def filter_shared_stream(self, stream):
        async for msg in stream:
            if not MARKS["first"]:
                MARKS["first"], MARKS["cpu_first"] = time.time(), time.process_time()
            json.loads(msg.value)
            MARKS["handled"] += 1
            if MARKS["handled"] >= TOTAL:
                MARKS["last"], MARKS["cpu_last"] = time.time(), time.process_time()
        return
        yield


class FilterStream(Keyed):
    async def filter_shared_stream(self, stream):
        key = self.key
        async for msg in stream:
            if msg.key == key:
                if not MARKS["first"]:
                    MARKS["first"], MARKS["cpu_first"] = time.time(), time.process_time()
                json.loads(msg.value)
                MARKS["handled"] += 1
                if MARKS["handled"] >= TOTAL:
                    MARKS["last"], MARKS["cpu_last"] = time.time(), time.process_time()
        return
        yield


KIND = {"match-batch": MatchBatch, "match-stream": MatchStream,
        "filter-batch": FilterBatch, "filter-stream": FilterStream}[SIDE]
MATCH = SIDE.startswith("match")
assets = [Asset(f"a{i}", watchers=[AssetWatcher(f"w{i}", KIND(
    topics=[TOPIC], kafka_config_id="bench", want=str(i),
    **({"match": {"key": [str(i)]}} if MATCH else {})))]) for i in range(N)]
'''


def fill(bootstrap: str, messages: int, keys: int) -> str:
    """A new 6-partition topic of ``messages`` JSON orders keyed ``i % keys``."""
    topic = f"scale-{keys}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in range(messages):
        while True:
            try:
                producer.produce(topic, value(i), key=str(i % keys).encode())
                break
            except BufferError:
                producer.poll(0.1)
    if producer.flush(120):
        raise RuntimeError(f"filling {topic} timed out")
    return topic


def peak_rss_mb(pid: int) -> float:
    """A running process's peak resident set (``VmHWM``), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


HERE = str(Path(sharedstream.__file__).resolve().parents[1])  # the code measured here


def timed_run(side: str, bootstrap: str, topic: str, messages: int, n: int, workdir: Path,
              schema: Path, src: str = HERE) -> dict[str, float]:
    """One process of ``side`` with ``n`` watchers (or handlers) over ``topic``, running
    the sharedstream found in ``src``."""
    group = f"scale-{side}-{uuid.uuid4().hex[:8]}"
    marks = workdir / f"marks-{group}.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]),
           "BENCH_TOPIC": topic, "BENCH_N": str(n), "BENCH_SIDE": side,
           "BENCH_MESSAGES": str(messages),
           "BENCH_MARKS": str(marks)}
    if side == "router":
        command = [sys.executable, str(ROOT / "bench" / "router_consumer.py"), bootstrap, topic,
                   str(messages), str(n), group, json.dumps(TUNED)]
        groups = [group]
    else:
        database = workdir / f"state-{group}.db"
        shutil.copyfile(schema, database)
        config = workdir / f"{group}.toml"
        config.write_text("\n".join([
            "[database]", f'url = "sqlite:///{database}"', "[triggerer]", "health_port = 0",
            "[connections.bench]", f'"bootstrap.servers" = "{bootstrap}"',
            f'"group.id" = "{group}"']) + "\n")
        command = [*COMMAND, "run", str(workdir / "watchers.py"), "--config", str(config)]
        groups = [f"{group}.{topic}"]
    watch = CommitWatch(bootstrap, topic, groups)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.time()
        child = subprocess.Popen(command, stdout=out, stderr=err, env=env, cwd=workdir)
        try:
            while True:
                exited = os.waitid(os.P_PID, child.pid,
                                   os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
                if watch.reached():
                    end, cpu = time.time(), cpu_seconds(child.pid)
                    rss = float("nan") if exited else peak_rss_mb(child.pid)
                    break
                if exited or time.time() - started > DEADLINE_S:
                    err.seek(0)
                    tail = err.read().decode(errors="replace").strip().splitlines()[-5:]
                    raise RuntimeError(f"{side} x{n} {'exited' if exited else 'ran out of time'}"
                                       f" before its commits reached the log end: {tail}")
                time.sleep(POLL_S)
        finally:
            watch.close()
            if child.poll() is None and side != "router":
                child.send_signal(signal.SIGTERM)
            child.wait(120)
        out.seek(0)
        found = (json.loads(out.read().decode().strip().splitlines()[-1]) if side == "router"
                 else json.loads(marks.read_text()))
    if not found["last"]:
        raise RuntimeError(f"{side} x{n}: the filters handled {found.get('handled')} of "
                           f"{messages} messages")
    wall = end - started
    return {"start_to_committed": messages / wall,
            "filter_side": messages / max(found["last"] - found["first"], 1e-9),
            "startup_s": found["first"] - started, "commit_tail_s": end - found["last"],
            "cpu_us": cpu / messages * 1e6,
            "filter_cpu_us": (found["cpu_last"] - found["cpu_first"]) / messages * 1e6,
            "rss_mb": found.get("rss_mb", rss) if rss != rss else rss}  # NaN: exited


def own_cost_us(n: int, messages: int, batch: int = 1_000) -> float:
    """CPU µs per watcher per message of the Python-filter sides' own work, without the
    framework: each of ``n`` watchers' loop (``FilterBatch``'s body, as a plain function)
    over ``messages`` messages keyed and valued as the topic's, in batches of ``batch``."""
    from sharedstream.core.message import KafkaMessage

    read = [KafkaMessage(f"scale-{n}", 0, i, 0, str(i % n).encode(), value(i))
            for i in range(messages)]
    batches = [read[i:i + batch] for i in range(0, messages, batch)]

    def body(key: bytes, batch: list[KafkaMessage]) -> int:
        handled = 0
        for msg in batch:
            if msg.key == key:
                json.loads(msg.value)  # type: ignore[arg-type]
                handled += 1
        return handled

    keys = [str(i).encode() for i in range(n)]
    start = time.process_time()
    for part in batches:
        for key in keys:
            body(key, part)
    return (time.process_time() - start) / messages / n * 1e6


def measure(bootstrap: str, messages: int, filter_messages: dict[int, int], runs: int,
            counts: tuple[int, ...] = COUNTS, sides: tuple[str, ...] = SIDES,
            baseline: str | None = None) -> dict[str, Any]:
    """Every side per N, ``runs`` alternating rounds, medians. Each round runs every side
    of every N once, so a ratio between two Ns (10,000 watchers against 1) compares runs
    minutes apart at most, never all of one N before all of the next (a machine's speed
    drifts over the minutes a whole N takes). With ``baseline`` (the ``src`` directory
    of another checkout) each sharedstream side also runs that code, right after this
    one on the same topic, as the side ``<side>@baseline``."""
    from sharedstream.statestore import StateStore

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        (workdir / "watchers.py").write_text(WATCHERS)
        schema = workdir / "schema.db"
        with StateStore.from_url(f"sqlite:///{schema}") as store:
            store.upgrade()
        plans: dict[int, list[tuple[str, str, str, str, int]]] = {}
        for n in counts:
            big = fill(bootstrap, messages, n)
            small_count = filter_messages.get(n, messages)
            small = (big if small_count == messages or not any(
                s.startswith("filter") for s in sides) else fill(bootstrap, small_count, n))
            plans[n] = [(label, side, src, big if not side.startswith("filter") else small,
                         messages if not side.startswith("filter") else small_count)
                        for side in sides
                        for label, src in [(side, HERE)] + (
                            [(f"{side}@baseline", baseline)]
                            if baseline and side != "router" else [])]
        found: dict[tuple[int, str], list[dict[str, float]]] = {
            (n, label): [] for n, plan in plans.items() for label, *_ in plan}
        for _ in range(runs):  # alternating: each round runs every side of every N once
            for n, plan in plans.items():
                for label, side, src, topic, count in plan:
                    run = timed_run(side, bootstrap, topic, count, n, workdir, schema, src)
                    found[(n, label)].append(run)
                    log(f"x{n} {label}: {run['start_to_committed']:,.0f}/s start to "
                        f"committed, {run['filter_side']:,.0f}/s filter-side, start-up "
                        f"{run['startup_s']:.2f} s, commits {run['commit_tail_s']:.2f} s "
                        f"after the last message, {run['cpu_us']:.1f} µs CPU/msg "
                        f"({run['filter_cpu_us']:.1f} filter-side), "
                        f"RSS {run['rss_mb']:.0f} MB")
        for n, plan in plans.items():
            small_count = filter_messages.get(n, messages)
            own = (own_cost_us(n, small_count)
                   if n > 1 and any(s == "filter-batch" for s in sides) else None)
            for label, side, _src, _topic, count in plan:
                got = found[(n, label)]
                row: dict[str, Any] = {"watchers": n, "side": label, "messages": count, **{
                    k: round(statistics.median(r[k] for r in got), 2)
                    for k in ("start_to_committed", "filter_side", "startup_s",
                              "commit_tail_s", "cpu_us",
                              "filter_cpu_us", "rss_mb")}}
                if side == "filter-batch" and own is not None:
                    watcher = row["filter_cpu_us"] / n
                    row.update(watcher_us=round(watcher, 4), own_us=round(own, 4),
                               framework_us=round(watcher - own, 4))
                rows.append(row)
    return {"runs": runs, "partitions": PARTITIONS, "fetch": TUNED, "rows": rows}


def targets(found: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 42's targets against these figures (missing rows: not measured)."""
    rows = {(r["watchers"], r["side"]): r for r in found["rows"]}
    out: list[dict[str, Any]] = []

    def ratio(a: tuple[int, str], b: tuple[int, str], key: str) -> float | None:
        if a not in rows or b not in rows:
            return None
        return float(rows[a][key] / rows[b][key])

    def add(target: str, measured: float | None, goal: float, unit: str = "x",
            below: bool = False) -> None:
        text = "not measured" if measured is None else f"{measured:.2f}{unit}"
        reached = measured is not None and (measured <= goal if below else measured >= goal)
        out.append({"target": target, "measured": text, "reached": reached})

    add("match, 10,000 watchers >= 0.8x 1 watcher, filter-side (batch API)",
        ratio((10_000, "match-batch"), (1, "match-batch"), "filter_side"), 0.8)
    add("match, 10,000 watchers >= 0.5x the hand-written router, filter-side",
        ratio((10_000, "match-batch"), (10_000, "router"), "filter_side"), 0.5)
    add("match, 1,000 watchers >= 0.6x the hand-written router, start to committed",
        ratio((1_000, "match-batch"), (1_000, "router"), "start_to_committed"), 0.6)
    batch = rows.get((1_000, "filter-batch"))
    add("Python filters, batch API, 1,000 watchers: framework cost <= 0.05 µs per watcher "
        "per message (CPU, the filters' own loop taken out)",
        None if batch is None else batch.get("framework_us"), 0.05, " µs", below=True)
    scale = rows.get((10_000, "match-batch"))
    add("start-up <= 5 s at 10,000 watchers", None if scale is None else scale["startup_s"],
        5.0, " s", below=True)
    add("RSS <= 400 MB at 10,000 watchers", None if scale is None else scale["rss_mb"],
        400.0, " MB", below=True)
    return out


def markdown(found: dict[str, Any]) -> str:
    lines = [f"Median of {found['runs']} alternating run(s); {found['partitions']} partitions; "
             f"fetch {found['fetch']} on every side. Each process timed from Popen until its "
             "commits were seen at the log end.", "",
             "| watchers | side | messages | msg/s start→committed | filter-side msg/s "
             "| CPU µs / message | filter-side CPU µs / message | start-up s | peak RSS MB |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in found["rows"]:
        lines.append(f"| {r['watchers']:,} | {r['side']} | {r['messages']:,} | "
                     f"{r['start_to_committed']:,.0f} | {r['filter_side']:,.0f} | "
                     f"{r['cpu_us']:,.1f} | {r['filter_cpu_us']:,.1f} | {r['startup_s']:.2f} | "
                     f"{r['rss_mb']:.0f} |")
    split = [r for r in found["rows"] if "framework_us" in r]
    if split:
        lines += ["", "Python filters, batch API: CPU µs per watcher per message, the filters' "
                  "own loop (timed alone in this run) and the framework's rest.", "",
                  "| watchers | side | per watcher per message | filters' own | framework |",
                  "|---:|---|---:|---:|---:|"]
        lines += [f"| {r['watchers']:,} | {r['side']} | {r['watcher_us']:.4f} | "
                  f"{r['own_us']:.4f} | {r['framework_us']:.4f} |" for r in split]
    lines += ["", "| issue 42 target | measured | reached |", "|---|---|---|"]
    lines += [f"| {t['target']} | {t['measured']} | {'yes' if t['reached'] else 'NO'} |"
              for t in found["targets"]]
    return "\n".join(lines) + "\n"


def log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


FILTER_MESSAGES = {1_000: 20_000, 10_000: 4_000}  # every message to every watcher: slow


def sizes(quick: bool) -> tuple[int, dict[int, int], tuple[int, ...]]:
    """(messages, the Python-filter sides' messages per N, the Ns)."""
    if quick:
        return 5_000, {1_000: 1_000}, (1, 100, 1_000)
    return 200_000, {100: 50_000, **FILTER_MESSAGES}, COUNTS


def run(bootstrap: str, quick: bool) -> dict[str, Any]:
    """The runner's part: every side at the default (or ``--quick``) sizes, one run."""
    messages, filters, counts = sizes(quick)
    found = measure(bootstrap, messages, filters, 1, counts)
    found["targets"] = targets(found)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.watchers_scale",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True, help="the Kafka broker, HOST:PORT")
    parser.add_argument("--quick", action="store_true", help="small counts: a smoke run")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--counts", help="comma-separated watcher counts (default: all)")
    parser.add_argument("--sides", nargs="+", choices=SIDES, help="run only these sides")
    parser.add_argument("--baseline", help="also run another checkout's code (its src "
                        "directory), alternating, as the sides <side>@baseline")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    # Every child loads bytecode, as an installed package's does (``python -m bench``
    # does this for every part).
    compile_measured(*([Path(args.baseline)] if args.baseline else []))
    messages, filters, counts = sizes(args.quick)
    if args.counts:
        counts = tuple(int(n) for n in args.counts.split(","))
    found = measure(args.bootstrap, messages, filters, args.runs, counts,
                    tuple(args.sides or SIDES), args.baseline)
    found["targets"] = targets(found)
    report.write_part(args.out, "watchers_scale", found, markdown(found))


if __name__ == "__main__":
    main()

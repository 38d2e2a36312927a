"""sharedstream against the libraries a user would pick instead: whole processes, same work.

    PYTHONPATH=src python -m bench.peers --bootstrap HOST:PORT [--peer-python PATH]

Part of ``python -m bench`` (``--peers`` runs only this). Issue 27's process workload
(``bench/json_fanout.py`` part 2) on the real broker, over the ~120-byte JSON orders of
``bench/decode_once.py``:

* 1 filter parsing every value and keeping nothing;
* 10 filters, each keeping the 1% paid orders (``messages // 4`` records: the work is
  ten times the deliveries).

The sides: plain confluent-kafka (``bench/plain_consumer.py``: one consumer per filter),
sharedstream's manager through the per-message API (``shared``) and the batch API
(``batch``), quixstreams, sentry-arroyo and faust-streaming (``bench/peer_process.py``,
each written as its documentation shows). Every librdkafka side gets the same fetch
override (``json_fanout.TUNED``); faust runs on aiokafka, which has no such setting.

Each run is a subprocess timed from ``Popen`` until its consumer groups' committed
offsets, read from outside by this process (``CommitWatch``, polled every
``POLL_S``), reach the log end; a process that exits before that, or takes longer than
``DEADLINE_S``, fails the bench instead of reporting a figure. Start-up is ``Popen`` to
the child's first message; CPU is the child's (``/proc``) at the end, per wall-clock
second. Runs alternate every side; medians of ``runs``.

The peers need their own packages (``pip install 'sharedstream[bench-peers]'``; quixstreams
pins an older confluent-kafka, so ``--peer-python`` can point at another environment
holding them); a peer that is not installed is skipped here, with a line saying so.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench import kafka_throughput as kt
from bench import report
from bench.decode_once import value
from bench.json_fanout import TUNED
from confluent_kafka import Consumer, TopicPartition

import sharedstream

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
PEERS = {"quixstreams": "quixstreams", "arroyo": "sentry-arroyo", "faust": "faust-streaming"}
SHARED = ("plain", "shared", "batch")  # the sides that need no extra package
EXTRA = "pip install 'sharedstream[bench-peers]'"
POLL_S = 0.01  # the end mark's resolution: one committed-offsets read per group per poll
DEADLINE_S = 600.0
_FIRST = re.compile(rb'\{"first": ([0-9.]+)')


class CommitWatch:
    """The committed offsets of consumer groups, read from outside the measured process.

    Its consumers only fetch offsets (no subscription, so they never join the groups);
    they and the log end are set up before the child starts, outside its timing."""

    def __init__(self, bootstrap: str, topic: str, groups: list[str]) -> None:
        probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-peers-probe"})
        meta = probe.list_topics(topic, timeout=10).topics[topic]
        self.partitions = [TopicPartition(topic, p) for p in sorted(meta.partitions)]
        self.end = sum(probe.get_watermark_offsets(tp, timeout=10)[1]
                       for tp in self.partitions)
        probe.close()
        self._pending = {g: Consumer({"bootstrap.servers": bootstrap, "group.id": g,
                                      "enable.auto.commit": False}) for g in groups}

    def reached(self) -> bool:
        """True once every group's commits add up to the log end (a group found there
        is not read again)."""
        for group, consumer in list(self._pending.items()):
            offsets = consumer.committed(self.partitions, timeout=10)
            if sum(max(tp.offset, 0) for tp in offsets) < self.end:
                return False
            consumer.close()
            del self._pending[group]
        return True

    def close(self) -> None:
        for consumer in self._pending.values():
            consumer.close()
        self._pending.clear()


def groups_of(side: str, group: str, topic: str, filters: int) -> list[str]:
    """The consumer groups a side's process commits in, for a ``group`` prefix."""
    if side == "plain":
        return [f"{group}.{i}" for i in range(filters)]  # one consumer (and group) per filter
    if side in ("shared", "batch"):
        return [f"{group}.{topic}"]  # sharedstream's name: <group.id>.<topic>
    return [group]


def command(side: str, bootstrap: str, topic: str, messages: int, filters: int, keep: bool,
            group: str, peer_python: str) -> list[str]:
    config = json.dumps(TUNED)
    if side == "plain":
        return [sys.executable, str(ROOT / "bench" / "plain_consumer.py"), bootstrap, topic,
                str(messages), str(filters), "1" if keep else "0", config, group]
    if side in ("shared", "batch"):
        return ([sys.executable, "-m", "bench.json_fanout", "--bootstrap", bootstrap, "--topic",
                 topic, "--messages", str(messages), "--watchers", str(filters), "--config",
                 json.dumps({**TUNED, "group.id": group})]
                + (["--keep"] if keep else []) + (["--batch"] if side == "batch" else []))
    return [peer_python, str(ROOT / "bench" / "peer_process.py"), side, bootstrap, topic,
            group, str(filters), "1" if keep else "0", config]


def cpu_seconds(pid: int) -> float:
    """User plus system CPU of a child (all its threads), running or exited but not reaped."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed_run(side: str, bootstrap: str, topic: str, messages: int, filters: int,
              keep: bool, peer_python: str = sys.executable,
              deadline_s: float = DEADLINE_S, group: str | None = None) -> dict[str, float]:
    """One process of ``side`` over ``topic``: deliveries/s (messages x filters) from
    ``Popen`` to the moment its commits were seen at the log end, start-up, CPU/wall,
    and CPU µs per delivery (start-up included: the figure a loaded machine moves least).
    ``group``: the prefix of its consumer groups (``groups_of``), a new one by default.

    Raises RuntimeError when the process exits (or ``deadline_s`` passes) before its
    commits reach the log end: such a run has no figure."""
    group = group or f"peers-{side}-{uuid.uuid4().hex[:8]}"
    watch = CommitWatch(bootstrap, topic, groups_of(side, group, topic, filters))
    src = str(Path(sharedstream.__file__).resolve().parents[1])  # the code measured here
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.time()
        child = subprocess.Popen(command(side, bootstrap, topic, messages, filters, keep, group,
                                         peer_python), stdout=out, stderr=err, env=env, cwd=ROOT)
        try:
            while True:
                # Before the read, so no exit is missed; WNOWAIT leaves an exited child
                # unreaped, its /proc CPU figures still readable.
                exited = os.waitid(os.P_PID, child.pid,
                                   os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
                if watch.reached():
                    end, cpu = time.time(), cpu_seconds(child.pid)
                    break
                if exited or time.time() - started > deadline_s:
                    err.seek(0)
                    tail = err.read().decode(errors="replace").strip().splitlines()[-5:]
                    raise RuntimeError(
                        f"{side} {'exited' if exited else 'ran out of time'} before its "
                        f"commits reached the log end ({watch.end}); its stderr ends: {tail}")
                time.sleep(POLL_S)
        finally:
            watch.close()
            stop(child, told=side not in SHARED)
        out.seek(0)
        first = _FIRST.search(out.read())
    wall = end - started
    return {"per_s": filters * messages / wall,
            "startup_s": float(first.group(1)) - started if first else float("nan"),
            "cpu_per_wall": cpu / wall, "cpu_us": cpu / (filters * messages) * 1e6}


def stop(child: subprocess.Popen[bytes], told: bool) -> None:
    """Plain and sharedstream exit once they committed the end (after printing their
    marks); the peers run until ``told``: SIGTERM (each shuts down cleanly on it).
    SIGKILL for one that is still there 30 s later."""
    if told and child.poll() is None:
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(30)
        except subprocess.TimeoutExpired:
            child.kill()
    child.wait()


def installed_peers(peer_python: str) -> dict[str, str | None]:
    """Each peer's installed version (and confluent-kafka's) in ``peer_python``'s
    environment, None if missing."""
    script = ("import importlib.metadata as m, json, sys\n"
              "def v(d):\n try: return m.version(d)\n except m.PackageNotFoundError: return None\n"
              "print(json.dumps({p: v(d) for p, d in json.loads(sys.argv[1]).items()}))")
    out = subprocess.run([peer_python, "-c", script,
                          json.dumps({**PEERS, "confluent-kafka": "confluent-kafka"})],
                         check=True, capture_output=True, text=True)
    found: dict[str, str | None] = json.loads(out.stdout)
    return found


def measure(bootstrap: str, messages: int, runs: int, peer_python: str = sys.executable,
            only: list[str] | None = None) -> dict[str, Any]:
    versions = installed_peers(peer_python)
    peer_kafka = versions.pop("confluent-kafka")
    peers = [p for p, v in versions.items() if v is not None and (only is None or p in only)]
    for peer, version in versions.items():
        if version is None:
            log(f"peer {peer} ({PEERS[peer]}) not installed in {peer_python}: skipped "
                f"({EXTRA})")
    sides = [s for s in SHARED if only is None or s in only] + peers
    ten_messages = max(1_000, messages // 4)
    workloads = [("1 filter, keep nothing", 1, False, kt.fill(bootstrap, messages, value),
                  messages),
                 ("10 filters, keep 1%", 10, True, kt.fill(bootstrap, ten_messages, value),
                  ten_messages)]
    found: dict[tuple[str, str], list[dict[str, float]]] = {}
    for _ in range(runs):  # alternating: each round runs every side once
        for workload, filters, keep, topic, count in workloads:
            for side in sides:
                run = timed_run(side, bootstrap, topic, count, filters, keep, peer_python)
                found.setdefault((workload, side), []).append(run)
                log(f"{workload}, {side}: {run['per_s']:,.0f}/s, start-up "
                    f"{run['startup_s']:.2f} s, {run['cpu_per_wall']:.2f} cores busy")
    rows = []
    for workload, filters, _keep, _topic, count in workloads:
        plains = found.get((workload, "plain"))
        plain = statistics.median(r["per_s"] for r in plains) if plains else None
        for side in sides:
            got = found[(workload, side)]
            per_s = statistics.median(r["per_s"] for r in got)
            rows.append({"workload": workload, "side": side, "messages": count,
                         "filters": filters, "per_s": round(per_s),
                         "vs_plain": None if plain is None else round(per_s / plain, 2),
                         "startup_s": round(statistics.median(r["startup_s"] for r in got), 2),
                         "cpu_per_wall": round(statistics.median(r["cpu_per_wall"]
                                                                 for r in got), 2),
                         "cpu_us_per_delivery": round(statistics.median(r["cpu_us"]
                                                                        for r in got), 2),
                         "runs_per_s": [round(r["per_s"]) for r in got]})
    return {"runs": runs, "tuned": TUNED, "poll_s": POLL_S, "peer_python": peer_python,
            "versions": {**versions, "confluent-kafka": _version("confluent-kafka"),
                         "confluent-kafka (peers)": peer_kafka},
            "rows": rows}


def _version(distribution: str) -> str:
    from importlib.metadata import version

    return version(distribution)


def markdown(found: dict[str, Any]) -> str:
    versions = ", ".join(f"{PEERS.get(p, p)} {v or 'not installed'}"
                         for p, v in found["versions"].items())
    lines = [f"Versions: {versions}. Fetch override on every librdkafka side: "
             f"{found['tuned']}. Median of {found['runs']} alternating runs; each timed from "
             f"Popen until its commits were seen at the log end (polled every "
             f"{found['poll_s'] * 1000:.0f} ms).", "",
             "| workload | side | messages x filters | deliveries/s | vs plain | start-up s "
             "| CPU s / wall s | CPU µs / delivery | runs |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in found["rows"]:
        ratio = "-" if r["vs_plain"] is None else f"{r['vs_plain']}x"
        lines.append(f"| {r['workload']} | {r['side']} | {r['messages']:,} x {r['filters']} | "
                     f"{r['per_s']:,} | {ratio} | {r['startup_s']} | {r['cpu_per_wall']} | "
                     f"{r['cpu_us_per_delivery']} | "
                     f"{', '.join(f'{x:,}' for x in r['runs_per_s'])} |")
    return "\n".join(lines) + "\n"


def log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.peers",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True, help="the Kafka broker, HOST:PORT")
    parser.add_argument("--messages", type=int, default=200_000,
                        help="records of the 1-filter topic (the 10-filter one: a quarter)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--peer-python", default=sys.executable,
                        help="the Python whose environment holds the peers")
    parser.add_argument("--only", nargs="+", choices=[*SHARED, *PEERS],
                        help="run only these sides")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    found = measure(args.bootstrap, args.messages, args.runs, args.peer_python, args.only)
    report.write_part(args.out, "peers", found, markdown(found))


if __name__ == "__main__":
    main()

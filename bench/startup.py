"""Issues 27 and 43's start-up probe: where the time from process start to the first
message goes.

Each run starts three fresh processes on a small topic and reads their phases from their
marks and log lines, in seconds after ``Popen``:

* ``sharedstream``, the bare child (``python -m bench.startup --child``): one watcher
  keeping nothing (``bench.json_fanout``'s child), no database. Interpreter up, imports
  done, the consumer group subscribed (``open_stream``), partitions assigned (group
  join), the first message at the watcher.
* ``cli``, what users run: ``sharedstream run watchers.py --config sharedstream.toml``
  with one watcher keeping every message (``bench.process_runs``'s, marking the first
  message its filter sees), a SQLite state store already at the schema head (a restart,
  the common case: a first start also creates the schema), health server on,
  sharedstream's own fetch defaults, a new consumer group. The consumer group subscribed
  and assigned (its log lines), the first message in the filter (issue 43's target:
  0.5 s), the first event persisted (the smallest ``asset_event.created_at``, the time
  the writing transaction stamped it); and the CPU seconds it had used when its
  assignment was logged (read from Linux's /proc: steadier than wall time on a loaded
  machine).
* ``plain_process``: plain confluent-kafka in a process of its own, subscribing with a
  new group and consuming until its first record (``PLAIN``): the same measure as the
  CLI's ``first``, the floor under it.

Plain confluent-kafka's join and its first record after assignment are also timed in
this process (``plain``). Prints one JSON line per run, then the medians.

    PYTHONPATH=src python -m bench.startup --bootstrap HOST:PORT [--runs 3] [--config JSON]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

MESSAGES = 3_000
TARGET_S = 0.5  # issue 43: process start to the first message in the filter


def child(bootstrap: str, topic: str, config: dict[str, Any]) -> None:
    imported_at = time.time()
    logging.basicConfig(level=logging.INFO, format="%(created)f %(message)s", stream=sys.stderr)
    from bench import json_fanout

    print(f"MARK imports {time.time()}", file=sys.stderr)
    marks = json_fanout.child(bootstrap, topic, MESSAGES, 1, False, config)
    print(f"MARK interpreter {imported_at}", file=sys.stderr)
    print(f"MARK first {marks['first']}", file=sys.stderr)


def phases(stderr: str, started: float) -> dict[str, float]:
    found: dict[str, float] = {}
    for line in stderr.splitlines():
        head, _, rest = line.partition(" ")
        if head == "MARK":
            name, at = rest.split()
            found[name] = float(at) - started
        elif "consumer group" in rest and "subscribed" not in found:
            found["subscribed"] = float(head) - started
        elif ": assigned " in rest and "assigned" not in found:
            found["assigned"] = float(head) - started
    order = ("interpreter", "imports", "subscribed", "assigned", "first")
    return {name: round(found[name], 3) for name in order}


def logged_at(line: str) -> float | None:
    """The epoch time of a ``sharedstream run`` text log line (its local ``asctime``)."""
    try:
        return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
    except ValueError:
        return None  # a continuation line


# bench.process_runs' watcher, its filter marking (once) when it saw its first message.
WATCHERS = '''
import os, sys, time
from sharedstream import Asset, AssetWatcher, KafkaSharedStreamTrigger, TriggerEvent

class Marked(KafkaSharedStreamTrigger):
    async def filter_shared_stream(self, stream):
        marked = False
        async for message in stream:
            if not marked:
                marked = True
                print(f"MARK first {time.time()}", file=sys.stderr, flush=True)
            yield TriggerEvent(message.text)

orders = Asset("orders", watchers=[AssetWatcher("orders", Marked(
    topics=[os.environ["BENCH_TOPIC"]], kafka_config_id="bench", poll_timeout=0.2))])
'''

# Plain confluent-kafka as a process: Popen to its first record (argv: bootstrap, topic).
PLAIN = '''
import sys, time, uuid
from confluent_kafka import Consumer
consumer = Consumer({"bootstrap.servers": sys.argv[1], "group.id": uuid.uuid4().hex,
                     "auto.offset.reset": "earliest", "enable.auto.commit": False})
consumer.subscribe([sys.argv[2]])
while not consumer.consume(1, 0.1):
    pass
print(f"MARK first {time.time()}", file=sys.stderr, flush=True)
consumer.close()
'''


def plain_process(bootstrap: str, topic: str) -> dict[str, float]:
    started = time.time()
    out = subprocess.run([sys.executable, "-c", PLAIN, bootstrap, topic], check=True,
                         capture_output=True, text=True)
    [mark] = [line for line in out.stderr.splitlines() if line.startswith("MARK first")]
    return {"first": round(float(mark.split()[2]) - started, 3)}


def cli_run(bootstrap: str, topic: str, workdir: Path, schema: Path) -> dict[str, float]:
    """One ``sharedstream run`` from ``Popen`` to its first persisted event, on a copy of
    the SQLite database ``schema``; stopped by SIGTERM once that event is there."""
    from bench.process_runs import COMMAND

    import sharedstream

    database = workdir / f"state-{uuid.uuid4().hex[:8]}.db"
    shutil.copyfile(schema, database)
    config = workdir / "sharedstream.toml"
    config.write_text("\n".join([
        "[database]", f'url = "sqlite:///{database}"', "[triggerer]", "health_port = 0",
        "[connections.bench]", f'"bootstrap.servers" = "{bootstrap}"',
        f'"group.id" = "startup-{uuid.uuid4().hex[:8]}"']) + "\n")
    src = str(Path(sharedstream.__file__).resolve().parents[1])  # the code measured here
    env = {**os.environ, "BENCH_TOPIC": topic,
           "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    lines: list[str] = []
    cpu: list[float] = []

    def read(stream: Any, pid: int) -> None:
        for line in stream:
            lines.append(line)
            if not cpu and ": assigned " in line:
                cpu.append(cpu_seconds(pid))

    started = time.time()
    process = subprocess.Popen([*COMMAND, "run", str(workdir / "watchers.py"), "--config",
                                str(config), "--log-level", "INFO"], cwd=workdir, env=env,
                               stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    reader = threading.Thread(target=read, args=(process.stderr, process.pid), daemon=True)
    reader.start()
    first: str | None = None
    with sqlite3.connect(database) as db:
        while first is None:
            assert process.poll() is None, "the triggerer exited:\n" + "".join(lines)
            time.sleep(0.02)  # polling only finds the row; its stamp is the figure
            first = db.execute("SELECT MIN(created_at) FROM asset_event").fetchone()[0]
    process.terminate()
    assert process.wait(60) == 0, "".join(lines)
    reader.join()
    found = {"persisted": datetime.fromisoformat(first).replace(tzinfo=UTC).timestamp()}
    for line in lines:
        at = logged_at(line)
        if line.startswith("MARK first"):
            found["first"] = float(line.split()[2])
        elif at is not None and ": consumer group " in line:
            found.setdefault("subscribed", at)
        elif at is not None and ": assigned " in line:
            found.setdefault("assigned", at)
    return {**{name: round(found[name] - started, 3)
               for name in ("subscribed", "assigned", "first", "persisted")},
            "cpu_to_assigned": round(cpu[0], 2)}


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user and system) process ``pid`` has used so far (Linux's /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def plain(bootstrap: str, topic: str) -> dict[str, float]:
    from confluent_kafka import Consumer

    assigned: list[float] = []
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                         "auto.offset.reset": "earliest"})
    start = time.time()
    consumer.subscribe([topic], on_assign=lambda c, p: assigned.append(time.time()))
    while not consumer.consume(1, 0.1):
        pass
    first = time.time()
    consumer.close()
    return {"join": round(assigned[0] - start, 3),
            "assigned_to_first": round(first - assigned[0], 3)}


def measure(bootstrap: str, runs: int = 3, config: str = "{}") -> dict[str, Any]:
    """``runs`` rounds of every side on one topic: each round's phases, the medians and
    issue 43's target (the CLI's first message in the filter within 0.5 s)."""
    from bench import kafka_throughput as kt
    from bench.decode_once import value
    from bench.services import compile_measured

    from sharedstream.statestore import StateStore

    compile_measured()  # every child loads bytecode, as an installed package does
    topic = kt.fill(bootstrap, MESSAGES, value)  # JSON orders: the child parses them
    rounds: list[dict[str, dict[str, float]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        (workdir / "watchers.py").write_text(WATCHERS)
        schema = workdir / "schema.db"
        with StateStore.from_url(f"sqlite:///{schema}") as store:
            store.upgrade()
        for _ in range(runs):
            started = time.time()
            out = subprocess.run([sys.executable, "-m", "bench.startup", "--bootstrap",
                                  bootstrap, "--config", config, "--child", topic],
                                 check=True, capture_output=True, text=True, env=os.environ)
            rounds.append({"sharedstream": phases(out.stderr, started),
                           "cli": cli_run(bootstrap, topic, workdir, schema),
                           "plain_process": plain_process(bootstrap, topic),
                           "plain": plain(bootstrap, topic)})
            print(json.dumps(rounds[-1]), flush=True)
    median = {side: {name: round(statistics.median(r[side][name] for r in rounds), 3)
                     for name in rounds[0][side]} for side in rounds[0]}
    first = median["cli"]["first"]
    return {"runs": rounds, "median": median, "targets": [{
        "target": "start-up: `sharedstream run`, process start to the first message in a "
                  "one-watcher filter <= 0.5 s",
        "measured": f"{first:.2f} s (plain confluent-kafka's process: "
                    f"{median['plain_process']['first']:.2f} s)",
        "reached": first <= TARGET_S}]}


def markdown(found: dict[str, Any]) -> str:
    """The medians, seconds after ``Popen``, and the target."""
    median = found["median"]
    lines = [f"| start-up, seconds after Popen (median of {len(found['runs'])}) | subscribed "
             "| assigned | first message | first event persisted |",
             "|---|---:|---:|---:|---:|"]
    for side, name in (("cli", "`sharedstream run` (SQLite, one watcher)"),
                       ("sharedstream", "the bare child (manager and adapter, no database)"),
                       ("plain_process", "plain confluent-kafka, a process")):
        row = median[side]
        lines.append(f"| {name} | {row.get('subscribed', '')} | {row.get('assigned', '')} | "
                     f"{row['first']} | {row.get('persisted', '')} |")
    lines += ["", "| issue 43 target | measured | reached |", "|---|---|---|"]
    lines += [f"| {t['target']} | {t['measured']} | {'yes' if t['reached'] else 'NO'} |"
              for t in found["targets"]]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--config", default="{}")
    parser.add_argument("--child", metavar="TOPIC")
    args = parser.parse_args()
    if args.child:
        child(args.bootstrap, args.child, json.loads(args.config))
        return
    found = measure(args.bootstrap, args.runs, args.config)
    print(json.dumps({"median": found["median"]}))
    print(markdown(found))


if __name__ == "__main__":
    main()

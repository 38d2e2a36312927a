"""Issue 27's start-up probe: where the time from process start to the first delivery goes.

Each run starts a fresh process (``python -m bench.startup --child``) with one watcher
keeping nothing of a small topic (``bench.issue27``'s child), and reads its phases from
its own marks and log lines, in seconds after ``Popen``: interpreter up, imports done,
the consumer group subscribed (``open_stream``), partitions assigned (group join), the
first message at the watcher. Plain confluent-kafka's join and its first record after
assignment are timed beside it, in this process.

    PYTHONPATH=src python -m bench.startup --bootstrap HOST:PORT [--runs 3] [--config JSON]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
import uuid
from typing import Any

MESSAGES = 3_000


def child(bootstrap: str, topic: str, config: dict[str, Any]) -> None:
    imported_at = time.time()
    logging.basicConfig(level=logging.INFO, format="%(created)f %(message)s", stream=sys.stderr)
    from bench import issue27

    print(f"MARK imports {time.time()}", file=sys.stderr)
    marks = issue27.child(bootstrap, topic, MESSAGES, 1, False, config)
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
    from bench import kafka_throughput as kt
    from bench.decode_once import value

    topic = kt.fill(args.bootstrap, MESSAGES, value)  # JSON orders: the child parses them
    for _ in range(args.runs):
        started = time.time()
        out = subprocess.run([sys.executable, "-m", "bench.startup", "--bootstrap",
                              args.bootstrap, "--config", args.config, "--child", topic],
                             check=True, capture_output=True, text=True, env=os.environ)
        print(json.dumps({"sharedstream": phases(out.stderr, started),
                          "plain": plain(args.bootstrap, topic)}), flush=True)


if __name__ == "__main__":
    main()

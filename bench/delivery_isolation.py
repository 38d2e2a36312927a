"""Ingestion with a dead destination next to ingestion with none, in the same run.

    KAFKA_BOOTSTRAP_SERVERS=... python -m bench.delivery_isolation [--messages 50000]
        [--rounds 2] [--database-url URL]

Each round runs ``sharedstream run`` (a real process) on a topic pre-filled with
``--messages`` JSON messages, one watcher keeping them all, and times its events from
the first persisted to the last (start-up excluded), for each setup in turn:

* ``none``: no destination;
* ``dead``: a webhook destination whose port refuses connections, from the first
  event on (``start = "earliest"``): every delivery round fails and backs off;
* ``live``: a webhook destination taking every event (a local HTTP server), so the
  cost of real delivery beside ingestion shows too.

The setups alternate round by round, so drift of the machine hits them alike. Prints
events/s per setup (median over rounds) and the ratios to ``none``; the target is a
dead destination within 10% of none.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import tempfile
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import sqlalchemy as sa
from bench.process_runs import COMMAND, WATCHERS, empty_database, fill, persisted_rate


class Accept(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again: connections are refused


def one_run(workdir: Path, bootstrap: str, database_url: str, count: int,
            destination: dict[str, object] | None) -> float:
    """Events/s of one process from its first persisted event to its last."""
    topic = fill(bootstrap, count, "iso")
    lines = ["[database]", f'url = "{database_url}"', "[triggerer]", "health_port = -1",
             "[connections.bench]", f'"bootstrap.servers" = "{bootstrap}"',
             f'"group.id" = "bench-{uuid.uuid4().hex[:8]}"']
    if destination is not None:
        lines.append("[destinations.out]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in destination.items()]
    config = workdir / "sharedstream.toml"
    config.write_text("\n".join(lines) + "\n")
    engine = sa.create_engine(database_url)
    env = {**os.environ, "BENCH_TOPIC": topic}
    command = COMMAND
    process = subprocess.Popen([*command, "run", str(workdir / "watchers.py"),
                                "--config", str(config), "--log-level", "WARNING"],
                               env=env, cwd=workdir)
    try:
        return persisted_rate(engine, process, count)
    finally:
        process.terminate()
        process.wait(60)
        empty_database(engine)
        engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--database-url")
    args = parser.parse_args()
    bootstrap = os.environ["KAFKA_BOOTSTRAP_SERVERS"]
    server = ThreadingHTTPServer(("127.0.0.1", 0), Accept)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    common = {"kind": "webhook", "secret": "s", "start": "earliest", "retry_max": 5.0}
    setups: dict[str, dict[str, object] | None] = {
        "none": None,
        "dead": {**common, "url": f"http://127.0.0.1:{closed_port()}/in"},
        "live": {**common, "url": f"http://127.0.0.1:{server.server_address[1]}/in"},
    }
    rates: dict[str, list[float]] = {name: [] for name in setups}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        (workdir / "watchers.py").write_text(WATCHERS)
        database_url = args.database_url or f"sqlite:///{workdir / 'bench.db'}"
        for _ in range(args.rounds):
            for name, destination in setups.items():
                rate = one_run(workdir, bootstrap, database_url, args.messages, destination)
                rates[name].append(rate)
                print(f"{name:5s} {rate:10,.0f} events/s", flush=True)
    server.shutdown()
    base = statistics.median(rates["none"])
    print(f"\nmedian over {args.rounds} rounds of {args.messages:,} messages:")
    for name, values in rates.items():
        median = statistics.median(values)
        print(f"{name:5s} {median:10,.0f} events/s  ratio to none {median / base:.3f}")


if __name__ == "__main__":
    main()

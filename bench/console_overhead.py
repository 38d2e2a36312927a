"""Ingestion with the console polled every second next to ingestion without it, same run.

    KAFKA_BOOTSTRAP_SERVERS=... python -m bench.console_overhead [--messages 200000]
        [--rounds 4] [--database-url URL] [--poll-interval 1.0]

Each round runs ``sharedstream run`` (a real process, its health server and ``/status``
on) on a topic pre-filled with ``--messages`` JSON messages over 3 partitions, one
watcher keeping them all, and times its events from the first persisted to the last
(start-up excluded), for each setup in turn:

* ``none``: no console;
* ``console``: ``sharedstream web`` on the same database, and a client polling it every
  ``--poll-interval`` seconds the way an open group page does: ``/api/v1/overview``,
  ``/api/v1/groups/<group>`` (the triggerer's ``/status`` plus the group's committed
  offsets and log ends from Kafka) and the group page's live fragment; the console's
  own background lag sampler runs too.

The setups alternate round by round, so drift of the machine hits them alike. Prints
events/s per setup (median over rounds) and the ratio console/none; the target is a
ratio of at least 0.95 (within 5%).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import sqlalchemy as sa
from bench.process_runs import COMMAND, WATCHERS, empty_database, fill, persisted_rate

from sharedstream.statestore.store import StateStore

WEB = [sys.executable, "-c", "from sharedstream.web.command import web; web()"]


class Poller:
    """A browser's worth of requests to the console, every ``interval`` seconds."""

    def __init__(self, base: str, group: str, interval: float) -> None:
        self.paths = ["/api/v1/overview", f"/api/v1/groups/{group}", f"/groups/{group}"]
        self.base = base
        self.interval = interval
        self.requests = 0
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for path in self.paths:
                request = urllib.request.Request(self.base + path,
                                                 headers={"X-Console-Fragment": "1"})
                try:
                    with urllib.request.urlopen(request, timeout=10) as reply:
                        reply.read()
                    self.requests += 1
                except OSError:
                    self.failures += 1
            self._stop.wait(self.interval)

    def __enter__(self) -> Poller:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(15)


def start_console(workdir: Path, config: Path) -> tuple[subprocess.Popen[bytes], str]:
    log = workdir / "web.log"
    with log.open("wb") as out:
        process = subprocess.Popen([*WEB, "--config", str(config), "--port", "0",
                                    "--connection", "bench"], cwd=workdir, stdout=out,
                                   stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while True:
        found = re.search(r"console on (http://\S+?)/ ", log.read_text())
        if found:
            return process, found.group(1)
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the console did not start: {log.read_text()}")
        time.sleep(0.05)


def one_run(workdir: Path, bootstrap: str, database_url: str, count: int, console: bool,
            poll_interval: float) -> tuple[float, int]:
    """Events/s of one process from its first persisted event to its last, and how many
    console requests were answered meanwhile."""
    topic = fill(bootstrap, count, "console")
    group_id = f"bench-{uuid.uuid4().hex[:8]}"
    config = workdir / "sharedstream.toml"
    config.write_text("\n".join([
        "[database]", f'url = "{database_url}"', "[triggerer]", "health_port = 0",
        "[connections.bench]", f'"bootstrap.servers" = "{bootstrap}"',
        f'"group.id" = "{group_id}"']) + "\n")
    with StateStore.from_url(database_url) as store:
        store.upgrade()
    engine = sa.create_engine(database_url)
    web = None
    process = None
    try:
        poller = None
        if console:
            web, base = start_console(workdir, config)
            poller = Poller(base, f"{group_id}.{topic}", poll_interval).__enter__()
        process = subprocess.Popen([*COMMAND, "run", str(workdir / "watchers.py"),
                                    "--config", str(config), "--log-level", "WARNING"],
                                   env={**os.environ, "BENCH_TOPIC": topic}, cwd=workdir)
        rate = persisted_rate(engine, process, count)
        served = 0
        if poller is not None:
            poller.__exit__()
            served = poller.requests
            assert poller.failures == 0 or served > 0, "the console answered nothing"
        return rate, served
    finally:
        for running in (process, web):
            if running is not None:
                running.terminate()
                running.wait(60)
        empty_database(engine)
        engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--database-url")
    parser.add_argument("--poll-interval", type=float, default=1.0)
    args = parser.parse_args()
    bootstrap = os.environ["KAFKA_BOOTSTRAP_SERVERS"]
    rates: dict[str, list[float]] = {"none": [], "console": []}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        (workdir / "watchers.py").write_text(WATCHERS)
        database_url = args.database_url or f"sqlite:///{workdir / 'bench.db'}"
        for _ in range(args.rounds):
            for name in rates:
                rate, served = one_run(workdir, bootstrap, database_url, args.messages,
                                       name == "console", args.poll_interval)
                rates[name].append(rate)
                extra = f"  ({served} console requests answered)" if name == "console" else ""
                print(f"{name:8s} {rate:10,.0f} events/s{extra}", flush=True)
    base = statistics.median(rates["none"])
    console = statistics.median(rates["console"])
    print(f"\nmedian over {args.rounds} rounds of {args.messages:,} messages:")
    print(f"none     {base:10,.0f} events/s")
    print(f"console  {console:10,.0f} events/s  ratio to none {console / base:.3f} "
          f"(target >= 0.95)")


if __name__ == "__main__":
    main()

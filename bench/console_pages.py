"""Issue 42's console figures: each list's page at 10,000 watchers, assets and 1,000 held.

    PYTHONPATH=src python -m bench.console_pages [--database-url URL] [--watchers 10000]
        [--repeats 20]

Part of ``python -m bench`` (``--console-pages`` runs only this). A PostgreSQL database
is seeded through the product's own writes (:func:`seed`): one group of ``--watchers``
watchers and a second group of ten sharing the first ten names, as many assets, and a
live triggerer row whose ``/status`` (a canned document served from a file, as big as
a real one: every watcher in the cohort, subscribed and with its own match) holds
1,000 messages. ``sharedstream web`` runs on it as a process, and each list (watchers,
held messages, assets; the API and the console page) is asked for its first page, a
middle page and a search, ``--repeats`` times over HTTP on loopback: the median and
the slowest. The console re-reads the triggerers at most once a second, so the
slowest includes that re-read (``/status`` fetched and parsed, the lists indexed
again); ``cold`` is one request right after the snapshot expired. The target is
<= 300 ms per page.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from sharedstream.statestore.store import StateStore
from sharedstream.triggerer.heartbeat import Heartbeat
from sharedstream.triggerer.registration import GroupDeclaration, register_groups

BIG = "scale.orders"
SMALL = "scale.refunds"  # its watchers' names are also BIG's: a name in two groups
SMALL_SIZE = 10
HELD = 1_000
TARGET_MS = 300.0
WEB = [sys.executable, "-c", "from sharedstream.web.command import web; web()"]
_LISTENING = re.compile(r"console on http://\S+?:(\d+)/")


def watcher_name(i: int) -> str:
    return f"watcher-{i:05d}"


def asset_name(i: int) -> str:
    return f"asset-{i:05d}"


def held_watcher(offset: int, watchers: int) -> str:
    """Who failed the held message at ``offset`` of BIG's partition 0."""
    return watcher_name(offset * 7 % watchers)


def unsubscribed(i: int) -> bool:
    """Every hundredth watcher of BIG is not subscribed in the live triggerer."""
    return i % 100 == 99


def status_document(watchers: int) -> dict[str, Any]:
    """What a triggerer running every seeded watcher answers on ``/status`` (the shape
    of triggerer/status.py): each watcher wants its own key."""
    names = [watcher_name(i) for i in range(watchers)]
    held = [{"topic": "scale-orders", "partition": 0, "offset": n,
             "reasons": {held_watcher(n, watchers): "ValueError: no amount"},
             "attempts": {held_watcher(n, watchers): 1}, "rounds": 1, "retry_in": 5.0}
            for n in range(HELD)]

    def group(name: str, members: list[str], held_here: list[Any]) -> dict[str, Any]:
        return {"consumer_group": name, "cohort": members,
                "present": [w for i, w in enumerate(members) if not unsubscribed(i)],
                "polling": True, "paused": False, "in_flight": 0, "queued": 0,
                "received": 0, "redelivered": 0, "unrouted": 0,
                "matches": {w: {"key": [str(i)]} for i, w in enumerate(members)},
                "partitions": [], "held": held_here, "waiting_for_partitions": None}

    return {"version": "bench", "process": None, "ready": True,
            "not_ready": [], "destinations": [],
            "groups": [group(BIG, names, held), group(SMALL, names[:SMALL_SIZE], [])]}


def seed(store: StateStore, status_url: str, watchers: int) -> Heartbeat:
    """The watchers' groups, their assets and a live triggerer row, written as
    ``sharedstream run`` writes them; the row's ``/status`` is ``status_url``."""
    names = [watcher_name(i) for i in range(watchers)]
    register_groups(store, [
        GroupDeclaration(("kafka", ("scale-orders",), "kafka_default"), BIG,
                         frozenset(names)),
        GroupDeclaration(("kafka", ("scale-refunds",), "kafka_default"), SMALL,
                         frozenset(names[:SMALL_SIZE]))], takeover=True)
    store.register_assets((asset_name(i), f"kafka://scale/{asset_name(i)}")
                          for i in range(watchers))
    heartbeat = Heartbeat(store, version="bench", watchers=["dags/scale.py"],
                          groups=[BIG, SMALL], status_url=status_url)
    heartbeat.register()
    return heartbeat


@contextmanager
def status_file(document: dict[str, Any]) -> Iterator[tuple[str, int]]:
    """``document`` served as ``/status`` from a file on a loopback port: its URL and
    size."""
    with tempfile.TemporaryDirectory() as tmp:
        body = json.dumps(document, separators=(",", ":")).encode()
        (Path(tmp) / "status").write_bytes(body)

        class Quiet(SimpleHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0),
                                     functools.partial(Quiet, directory=tmp))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}/status", len(body)
        finally:
            server.shutdown()
            server.server_close()


def cases(watchers: int) -> list[tuple[str, str]]:
    """(label, path): each list's first page, a middle page and a search, API and page."""
    middle = (watchers // 2 // 50) * 50
    held_middle = HELD // 2
    return [
        ("API watchers, first page", "/api/v1/watchers?limit=50"),
        ("API watchers, middle page", f"/api/v1/watchers?limit=50&offset={middle}"),
        ("API watchers, search", "/api/v1/watchers?q=r-0424&limit=50"),
        ("page watchers, first page", "/watchers"),
        ("page watchers, middle page", f"/watchers?offset={middle}"),
        ("page watchers, search", "/watchers?q=r-0424"),
        ("API held, first page", "/api/v1/held?limit=50"),
        ("API held, middle page", f"/api/v1/held?limit=50&offset={held_middle}"),
        ("API held, search", "/api/v1/held?q=watcher-0007&limit=50"),
        ("page held, first page", "/held"),
        ("page held, middle page", f"/held?offset={held_middle}"),
        ("page held, search", "/held?q=watcher-0007"),
        ("API assets, first page", "/api/v1/assets?limit=50"),
        ("API assets, middle page", f"/api/v1/assets?limit=50&offset={middle}"),
        ("API assets, search", "/api/v1/assets?q=SET-0424&limit=50"),
        ("page assets, first page", "/assets"),
        ("page assets, middle page", f"/assets?offset={middle}"),
        ("page assets, search", "/assets?q=SET-0424"),
    ]


def timed_get(url: str) -> float:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=30) as reply:
        reply.read()
        assert reply.status == 200, url
    return (time.perf_counter() - started) * 1000


@contextmanager
def console(database_url: str) -> Iterator[str]:
    """``sharedstream web`` on ``database_url``, loopback, a free port: its base URL."""
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "web.log"
        with log.open("wb") as out:
            process = subprocess.Popen([*WEB, "--database-url", database_url, "--host",
                                        "127.0.0.1", "--port", "0"],
                                       stdout=out, stderr=subprocess.STDOUT,
                                       env={**os.environ, "PYTHONUNBUFFERED": "1"})
        try:
            deadline = time.monotonic() + 60
            while (found := _LISTENING.search(log.read_text())) is None:
                assert process.poll() is None, f"the console exited: {log.read_text()}"
                assert time.monotonic() < deadline, "the console did not start in 60 s"
                time.sleep(0.1)
            yield f"http://127.0.0.1:{found.group(1)}"
        finally:
            process.terminate()
            process.wait(30)


def measure(database_url: str, watchers: int, repeats: int) -> dict[str, Any]:
    with (StateStore.from_url(database_url) as store,
          status_file(status_document(watchers)) as (url, size)):
        store.upgrade()
        heartbeat = seed(store, url, watchers)
        with console(database_url) as base:
            rows = []
            for label, path in cases(watchers):
                heartbeat.beat()  # alive (a row unseen for 30 s is stale)
                timed_get(base + path)  # the console's first read of this list
                times = [timed_get(base + path) for _ in range(repeats)]
                time.sleep(1.1)  # the snapshot expires: the next request re-reads
                cold = timed_get(base + path)
                rows.append({"case": label, "path": path,
                             "median_ms": round(statistics.median(times), 1),
                             "max_ms": round(max(times), 1), "cold_ms": round(cold, 1)})
                print(json.dumps(rows[-1]), flush=True)
    worst = max(max(r["max_ms"], r["cold_ms"]) for r in rows)
    return {"watchers": watchers, "assets": watchers, "held": HELD, "repeats": repeats,
            "status_bytes": size, "pages": rows, "targets": [{
                "target": "each list page (watchers, assets, held; API and console) "
                          f"<= {TARGET_MS:.0f} ms at {watchers:,} watchers",
                "measured": f"slowest {worst:.0f} ms", "reached": worst <= TARGET_MS}]}


def markdown(found: dict[str, Any]) -> str:
    lines = [f"{found['watchers']:,} watchers (two groups), {found['assets']:,} assets, "
             f"{found['held']:,} held messages; the triggerer's /status is "
             f"{found['status_bytes']:,} bytes.", "",
             f"| page (50 rows) | median ms ({found['repeats']} requests) | slowest ms | "
             "cold ms (snapshot re-read) |", "|---|---:|---:|---:|"]
    lines += [f"| {r['case']} | {r['median_ms']} | {r['max_ms']} | {r['cold_ms']} |"
              for r in found["pages"]]
    lines += ["", "| issue 42 target | measured | reached |", "|---|---|---|"]
    lines += [f"| {t['target']} | {t['measured']} | {'yes' if t['reached'] else 'NO'} |"
              for t in found["targets"]]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", help="an empty database (default: a fresh one "
                                               "on the bench's PostgreSQL)")
    parser.add_argument("--watchers", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    if args.database_url:
        found = measure(args.database_url, args.watchers, args.repeats)
    else:
        import contextlib

        from bench.services import Services

        with contextlib.ExitStack() as stack:
            found = measure(Services(stack).postgres(), args.watchers, args.repeats)
    print(markdown(found))


if __name__ == "__main__":
    main()

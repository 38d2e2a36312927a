"""Unit-of-work throughput: DatabaseWorkSink + WatcherStateAccess without a broker.

10 watchers each keep 10% of the messages (so one event per message overall) and
advance a per-partition watermark with every kept message; windows are driven by hand
the way the manager hands them over. Prints events/s for SQLite and, when
``--postgres URL`` is given (or a local server can be started), PostgreSQL.

    python bench/uow_throughput.py [--messages 100000] [--postgres URL]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sharedstream.core.window import SUBMITTED, Window, current_stream
from sharedstream.statestore import StateStore
from sharedstream.triggerer.config import ProcessSettings
from sharedstream.triggerer.gctune import tune_gc
from sharedstream.triggerer.state_access import WatcherStateAccess
from sharedstream.triggers.base import TriggerEvent
from sharedstream.uow.sink import DatabaseWorkSink

WATCHERS = 10
PARTITIONS = 6


class Driver:
    """One watcher's stream, as far as the sink and the state access can tell."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.window: Window | None = None
        self.confirmed = 0

    def current_window(self) -> Window | None:
        return self.window

    def reject(self, reason: str) -> bool:
        return False

    def window_confirmed(self, window: Window) -> None:
        self.confirmed += 1

    def window_failed(self, window: Window, exc: BaseException) -> None:
        raise AssertionError(exc)

    def window_rejected(self, window: Window, reason: str) -> None:
        raise AssertionError(reason)


async def run(url: str, messages: int) -> dict[str, Any]:
    store = StateStore.from_url(url)
    store.upgrade()
    names = [f"w{i}" for i in range(WATCHERS)]
    assets = {n: store.register_asset(f"asset_{n}") for n in names}
    sink = DatabaseWorkSink(store, assets, ProcessSettings(),
                            coordinates=lambda p: ("t", "tid", p[0], p[1]))
    drivers = {n: Driver(n) for n in names}
    access = {n: WatcherStateAccess(store, n, f"asset_{n}", assets[n]) for n in names}
    started = time.perf_counter()
    for offset in range(messages):
        partition = offset % PARTITIONS
        name = names[offset % WATCHERS]  # each watcher keeps 10%
        driver = drivers[name]
        window = driver.window = Window(driver, None, name, None, (partition, offset))
        current_stream.set(driver)
        await access[name].aadvance(f"last_seen/{partition}", offset)
        window.events.append(TriggerEvent({"partition": partition, "offset": offset}))
        driver.window = None
        window.state = SUBMITTED
        sink.submit([window])
        if offset % 2000 == 1999:
            await asyncio.sleep(0)  # the manager's loop also yields between batches
    await sink.drain()
    seconds = time.perf_counter() - started
    assert sum(d.confirmed for d in drivers.values()) == messages
    await sink.aclose()
    store.close()
    return {"database": url.split(":")[0], "events": messages, "seconds": round(seconds, 3),
            "events_per_second": round(messages / seconds), "batches": sink.figures.batches}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--postgres", help="SQLAlchemy URL of an empty PostgreSQL database")
    args = parser.parse_args()
    tune_gc()  # as `sharedstream run` does once start-up is over
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        results.append(asyncio.run(run(f"sqlite:///{Path(tmp) / 'bench.db'}", args.messages)))
    server = None
    url = args.postgres
    if url is None:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
        from localservices import PostgresServer  # type: ignore[import-not-found]

        server = PostgresServer()
        server.start()
        url = server.create_database()
    try:
        results.append(asyncio.run(run(url, args.messages)))
    finally:
        if server is not None:
            server.stop()
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

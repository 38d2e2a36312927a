"""Clean 100,000 expired task-state rows in batches of 10,000 while a writer keeps writing.

Prints the cleanup's total time and the writer's longest stall (the longest gap between
two of its committed writes), the figure batching exists to bound.

    python bench/statestore_cleanup.py [--url URL] [--rows 100000] [--batch 10000]

Default URL: a SQLite file in a temp dir. PostgreSQL: ``--url postgresql+psycopg://...``
(tables are created in a fresh schema there and dropped afterwards).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from sharedstream.statestore import StateStore, StateStoreSettings, TaskScope
from sharedstream.statestore.models import task_state_store


def seed(store: StateStore, rows: int) -> None:
    past = datetime.now(UTC) - timedelta(days=1)
    with store.engine.begin() as connection:
        for start in range(0, rows, 10_000):
            connection.execute(task_state_store.insert(), [
                {"dag_id": "bench", "run_id": f"run-{i // 100}", "task_id": "t",
                 "map_index": i % 100, "key": "k", "value": '"x"', "payload_ref": None,
                 "updated_at": past, "expires_at": past}
                for i in range(start, min(start + 10_000, rows))
            ])


def run(url: str, rows: int, batch: int) -> dict[str, float | int | str]:
    store = StateStore.from_url(url, StateStoreSettings(state_cleanup_batch_size=batch))
    store.upgrade()
    seed(store, rows)
    stop = threading.Event()
    gaps: list[float] = []
    writes = 0

    def writer() -> None:
        nonlocal writes
        job = store.task(TaskScope("bench-writer", "run", "t"))
        last = time.perf_counter()
        while not stop.is_set():
            job.set(f"k{writes % 50}", writes)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now
            writes += 1

    thread = threading.Thread(target=writer)
    thread.start()
    time.sleep(0.5)  # writer at steady state before the cleanup starts
    report = store.cleanup()
    stop.set()
    thread.join()
    store.close()
    return {
        "dialect": make_url(url).get_backend_name(),
        "rows": report.rows, "batches": report.batches,
        "cleanup_seconds": round(report.seconds, 3),
        "writer_writes": writes,
        "writer_longest_stall_ms": round(max(gaps) * 1000, 1),
        "writer_median_ms": round(sorted(gaps)[len(gaps) // 2] * 1000, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=10_000)
    args = parser.parse_args()
    if args.url is None:
        with tempfile.TemporaryDirectory() as tmp:
            result = run(f"sqlite:///{Path(tmp) / 'bench.db'}", args.rows, args.batch)
    elif make_url(args.url).get_backend_name() == "postgresql":
        schema = f"bench_{uuid.uuid4().hex[:8]}"
        admin = sa.create_engine(args.url, isolation_level="AUTOCOMMIT")
        with admin.connect() as connection:
            connection.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
        try:
            url = make_url(args.url).update_query_dict({"options": f"-csearch_path={schema}"})
            result = run(url.render_as_string(hide_password=False), args.rows, args.batch)
        finally:
            with admin.connect() as connection:
                connection.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
    else:
        result = run(args.url, args.rows, args.batch)
    print(json.dumps(result))


if __name__ == "__main__":
    main()

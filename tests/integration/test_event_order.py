"""Commit-ordered event ids: a reader that follows ``id > cursor`` misses no event.

Several writers insert events concurrently, each holding its transaction open for a
random moment after the insert (a slow commit: the outbox trap's window). A reader
polls ``events_after(cursor)`` all the while and moves its cursor to the highest id
it saw. With ids assigned at insert time (autoincrement), a transaction that took a
lower id and commits late is skipped for good; with ids allocated in commit order,
every row is read exactly once. Run on PostgreSQL and MariaDB (real concurrency) and
SQLite (one writer at a time).

The reader waits a millisecond after a poll that found nothing, as a cursor reader
does. Without the pause its loop held the GIL nearly all the time. The writers' own
steps then waited for it, each 5-20 ms transaction stretched to about 0.5 s, and on
SQLite a writer waiting in the busy handler, which polls every 100 ms, found the lock
free too seldom: on a two-CPU machine one waited out the whole 30-second busy timeout
("database is locked") in every run.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from typing import Any

import sqlalchemy as sa

from sharedstream.statestore.events import events_after, insert_events
from sharedstream.statestore.models import asset_event
from sharedstream.statestore.store import StateStore
from sharedstream.statestore.types import utcnow

WRITERS = 6
BATCHES = 40  # per writer
ROWS = 5  # per batch


def test_a_cursor_reader_sees_every_event_of_concurrent_late_committing_writers(
        db_url: str) -> None:
    store = StateStore.from_url(db_url)
    store.upgrade()
    asset_id = store.register_asset("orders")
    engine = store.engine
    done = threading.Event()
    errors: list[BaseException] = []

    def write(writer: int) -> None:
        rng = random.Random(writer)
        try:
            for batch in range(BATCHES):
                rows: list[dict[str, Any]] = [
                    {"asset_id": asset_id, "watcher": f"w{writer}", "payload": "{}",
                     "topic": "orders", "topic_id": "tid", "partition": writer,
                     "offset": batch * ROWS + i, "event_index": 0, "created_at": utcnow()}
                    for i in range(ROWS)]
                with engine.begin() as connection:
                    insert_events(connection, rows)
                    time.sleep(rng.uniform(0, 0.02))  # commits late: the trap's window
        except BaseException as exc:  # reported by the test, not lost in the thread
            errors.append(exc)

    read: Counter[int] = Counter()

    def follow() -> None:
        cursor = 0
        try:
            while True:
                finished = done.is_set()  # before the read: a last pass after the writers
                with engine.connect() as connection:
                    found = events_after(connection, cursor, limit=500)
                read.update(event.id for event in found)
                if found:
                    cursor = found[-1].id
                elif finished:
                    return
                else:
                    time.sleep(0.001)  # nothing new: poll again soon, not in a busy loop
        except BaseException as exc:
            errors.append(exc)

    writers = [threading.Thread(target=write, args=(n,)) for n in range(WRITERS)]
    reader = threading.Thread(target=follow)
    reader.start()
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join()
    done.set()
    reader.join()
    assert errors == []
    with engine.connect() as connection:
        stored = set(connection.execute(sa.select(asset_event.c.id)).scalars())
    assert len(stored) == WRITERS * BATCHES * ROWS
    assert set(read) == stored, f"{len(stored - set(read))} events skipped by the reader"
    assert max(read.values()) == 1
    store.close()

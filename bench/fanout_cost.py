"""Fan-out cost per delivery: a queue per watcher against one shared log with a cursor each.

The decision behind issue 14's "fan-out by cursor, if that measures faster": the
group appends each message to every watcher's deque and each stream pops it. A
shared log read through one cursor per watcher would replace the append and the pop
with an index step. This measures both bare (100 watchers, 500 messages, best of 5),
so the saving can be set against the ~2,200 ns a shared x100 delivery costs in
``bench/kafka_throughput.py``. Run:

    python bench/fanout_cost.py
"""

from __future__ import annotations

import timeit
from collections import deque

WATCHERS, MESSAGES = 100, 500
ENTRIES = [object() for _ in range(MESSAGES)]


def per_watcher_queues() -> None:
    queues: list[deque[object]] = [deque() for _ in range(WATCHERS)]
    for entry in ENTRIES:
        for queue in queues:
            queue.append(entry)
    for queue in queues:
        while queue:
            queue.popleft()


def shared_log_cursors() -> None:
    log = list(ENTRIES)
    cursors = [0] * WATCHERS
    for watcher in range(WATCHERS):
        cursor, end = cursors[watcher], len(log)
        while cursor < end:
            log[cursor]
            cursor += 1
        cursors[watcher] = cursor


def main() -> None:
    for run in (per_watcher_queues, shared_log_cursors):
        seconds = min(timeit.repeat(run, number=20, repeat=5)) / 20
        print(f"{run.__name__:<20} {seconds / (WATCHERS * MESSAGES) * 1e9:6.1f} ns per delivery")


if __name__ == "__main__":
    main()

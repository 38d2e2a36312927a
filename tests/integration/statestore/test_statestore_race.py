"""``advance`` raced by four processes: ends at the maximum, never observed going back."""

from __future__ import annotations

import multiprocessing
import random
import threading

from sharedstream.statestore import AssetScope, StateStore, Writer

WORKERS = 4
VALUES = 400


def _racer(url: str, worker: int, start: threading.Barrier,
           values: int = VALUES) -> list[str]:
    """Advance to this worker's share of 0..values-1 in random order; after every call,
    check that the value read is never below one seen earlier or below what we moved it to.
    (The fault suite runs it at 10,000 values: tests/faults/test_contention.py.)"""
    store = StateStore.from_url(url)
    state = store.asset(AssetScope(name="race"), writer=Writer.watcher(f"w{worker}"))
    mine = list(range(worker, values, WORKERS))
    random.Random(worker).shuffle(mine)
    problems: list[str] = []
    highest_seen = -1
    start.wait(timeout=60)
    for value in mine:
        moved = state.advance("wm", value)
        seen = state.get("wm")
        if seen < highest_seen:
            problems.append(f"worker {worker}: went back from {highest_seen} to {seen}")
        if moved and seen < value:
            problems.append(f"worker {worker}: advance to {value} returned True, read {seen}")
        highest_seen = max(highest_seen, seen)
    store.close()
    return problems


def _run(args: tuple[str, int, threading.Barrier, int]) -> list[str]:
    return _racer(*args)


def test_advance_raced_by_processes(store: StateStore, db_url: str) -> None:
    state = store.asset(AssetScope(name="race"))
    assert state.advance("wm", -1) is True
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:
        barrier = manager.Barrier(WORKERS)
        with context.Pool(WORKERS) as pool:
            results = pool.map(_run, [(db_url, w, barrier, VALUES) for w in range(WORKERS)])
    assert [p for problems in results for p in problems] == []
    assert state.get("wm") == VALUES - 1

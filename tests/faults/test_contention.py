"""State store under contention: 4 processes advance one asset cursor 10,000 times in total.

Reuses the integration race's worker (``tests/integration/statestore``), at the
fault suite's size and on PostgreSQL only: each worker checks after every call
that the value it reads never went back; the end value is the maximum.
"""

from __future__ import annotations

import multiprocessing
import sys
import time
from pathlib import Path

from faultkit import Figures, Size

from sharedstream.statestore import AssetScope, StateStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration" / "statestore"))

from test_statestore_race import WORKERS, _run


def test_four_processes_advance_one_cursor_never_back_end_at_max(
        pg_url: str, size: Size, figures: Figures) -> None:
    values = size.pick(10_000, 100_000)
    store = StateStore.from_url(pg_url)
    store.upgrade()
    state = store.asset(AssetScope(name="race"))
    assert state.advance("wm", -1) is True
    context = multiprocessing.get_context("spawn")
    began = time.monotonic()
    with context.Manager() as manager:
        barrier = manager.Barrier(WORKERS)
        with context.Pool(WORKERS) as pool:
            results = pool.map(_run, [(pg_url, w, barrier, values) for w in range(WORKERS)])
    seconds = time.monotonic() - began
    problems = [p for found in results for p in found]
    final = state.get("wm")
    store.close()
    figures.record("state store contention (4 processes, one cursor)", messages=values,
                   faults=0, lost=0 if final == values - 1 else 1, duplicates=0,
                   recover_seconds=None, advances_per_s=round(values / seconds),
                   went_backwards=len(problems))
    assert problems == []
    assert final == values - 1

"""The last hour of per-partition lag, in memory: what the group charts draw.

A sample is taken whenever the console fetches the triggerers' ``/status`` (at most
once a second while pages or the API are polled, and every ``--sample-interval``
seconds by a background task otherwise). Each partition keeps a bounded ring; samples
older than the window are dropped. Nothing is persisted: a restarted console starts a
new history. Each partition remembers where its newest sample came from (the owning
triggerer, or the broker's committed offsets when no live triggerer reports it), so
the chart says what it shows.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Mapping

Partition = tuple[str, int]
Sample = tuple[float, int]  # (unix time, lag)


class LagHistory:
    def __init__(self, window_s: float = 3600.0, min_gap_s: float = 0.9,
                 max_groups: int = 1000) -> None:
        self.window_s = window_s
        self.min_gap_s = min_gap_s
        self.max_groups = max_groups
        self._maxlen = int(window_s / min_gap_s) + 2
        self._groups: dict[str, dict[Partition, deque[Sample]]] = {}
        self._last: dict[str, float] = {}
        self._sources: dict[str, dict[Partition, str]] = {}
        self._lock = threading.Lock()

    def record(self, now: float, group: str, lags: Mapping[Partition, int],
               sources: Mapping[Partition, str] | None = None) -> bool:
        """Add one sample per partition of ``group`` (``sources``: where each came from);
        False when the last one is too recent, or there is none."""
        if not lags:
            return False
        with self._lock:
            if now - self._last.get(group, float("-inf")) < self.min_gap_s:
                return False
            if group not in self._groups and len(self._groups) >= self.max_groups:
                return False
            self._last[group] = now
            rings = self._groups.setdefault(group, {})
            for partition, lag in lags.items():
                ring = rings.get(partition)
                if ring is None:
                    ring = rings[partition] = deque(maxlen=self._maxlen)
                ring.append((now, int(lag)))
            self._sources.setdefault(group, {}).update(sources or {})
            self._trim(rings, now)
            return True

    def _trim(self, rings: dict[Partition, deque[Sample]], now: float) -> None:
        oldest = now - self.window_s
        for partition in list(rings):
            ring = rings[partition]
            while ring and ring[0][0] < oldest:
                ring.popleft()
            if not ring:
                del rings[partition]

    def series(self, group: str, now: float) -> dict[Partition, list[Sample]]:
        """Every partition's samples within the window, oldest first."""
        with self._lock:
            rings = self._groups.get(group, {})
            self._trim(rings, now)
            return {p: list(ring) for p, ring in sorted(rings.items())}

    def sources(self, group: str) -> dict[Partition, str]:
        """Where each partition's newest sample came from (``triggerer`` or ``kafka``)."""
        with self._lock:
            return dict(self._sources.get(group, {}))

"""Per-partition lag from librdkafka's statistics, for ``/metrics``.

librdkafka already tracks, per assigned partition, the log end (``hi_offset``),
the next offset the application will see (``app_offset``) and the committed
offset; it reports them as JSON every ``statistics.interval.ms``. Parsing that
on its callback is far cheaper than asking the broker on every scrape.

* lag: messages on the broker not yet committed (``hi_offset - committed``);
* commit lag: messages handed to watchers but not yet committed
  (``app_offset - committed``): what a crash right now would redeliver.
"""

from __future__ import annotations

import json

from sharedstream.core.contract import PartitionStats

__all__ = ["STATS_INTERVAL_MS", "PartitionStats", "partition_stats"]

STATS_INTERVAL_MS = 5000


def partition_stats(text: str) -> dict[tuple[str, int], PartitionStats]:
    """``{(topic, partition): PartitionStats}`` of the assigned partitions in a stats blob."""
    found: dict[tuple[str, int], PartitionStats] = {}
    try:
        topics = json.loads(text).get("topics", {})
    except ValueError:
        return found
    for topic, info in topics.items():
        for key, p in info.get("partitions", {}).items():
            partition = int(key)
            if partition < 0 or p.get("fetch_state") in (None, "none", "stopped"):
                continue
            hi, committed, app = p.get("hi_offset", -1), p.get("committed_offset", -1), \
                p.get("app_offset", -1)
            base = committed if committed >= 0 else app
            lag = max(hi - base, 0) if hi >= 0 and base >= 0 else 0
            commit_lag = max(app - committed, 0) if app >= 0 and committed >= 0 else 0
            found[(topic, partition)] = PartitionStats(
                lag, commit_lag, p.get("fetch_state") == "paused", committed, app, hi)
    return found

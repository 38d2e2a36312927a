from __future__ import annotations

import json

from sharedstream.kafka.stats import PartitionStats, partition_stats


def test_partition_stats_reads_assigned_partitions_only() -> None:
    blob = json.dumps({"topics": {"orders": {"partitions": {
        "0": {"fetch_state": "active", "hi_offset": 100, "committed_offset": 40,
              "app_offset": 70},
        "1": {"fetch_state": "paused", "hi_offset": 10, "committed_offset": -1,
              "app_offset": 5},
        "2": {"fetch_state": "none", "hi_offset": 10, "committed_offset": 0, "app_offset": 0},
        "-1": {"fetch_state": "none"},
    }}}})
    assert partition_stats(blob) == {
        ("orders", 0): PartitionStats(lag=60, commit_lag=30, paused=False, committed=40,
                                      position=70, end=100),
        ("orders", 1): PartitionStats(lag=5, commit_lag=0, paused=True, committed=-1,
                                      position=5, end=10),
    }


def test_partition_stats_survives_garbage() -> None:
    assert partition_stats("not json") == {}



def test_per_watcher_outcomes_are_bounded_and_the_group_sums_them() -> None:
    """10,000 watchers: the group's outcomes summed, and per-watcher series only for the
    few that failed and rejected most; a small group keeps a series per watcher."""
    from sharedstream.core.counters import GroupCounters
    from sharedstream.triggerer.metrics import PER_WATCHER_TOP, watcher_outcomes

    cohort = [f"w{i}" for i in range(10_000)]
    counters = GroupCounters(clean=5, unrouted=7)
    counters.failed.update({"w3": 2, "w9999": 1})
    counters.rejected.update({"w42": 4})
    counters.acked.update({"w1": 10})
    totals, shown = watcher_outcomes(cohort, counters)
    assert totals == {"acked": 5 * 10_000 + 10, "failed": 3, "rejected": 4, "unrouted": 7}
    assert len(shown) == PER_WATCHER_TOP
    assert {"w3", "w42", "w9999"} <= {name for name, _ in shown}
    small, every = watcher_outcomes(["a", "b"], GroupCounters())
    assert [name for name, _ in every] == ["a", "b"] and small["unrouted"] == 0

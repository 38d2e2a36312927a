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


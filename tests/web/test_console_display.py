"""The console's display logic (issue 29): the lag chart's ticks and lines, the one time
format, the joins of live and broker lag, and the cache that never makes a page wait.
Unit tests: no services (the browser tests show the same on real ones)."""

from __future__ import annotations

import asyncio
import re
import threading
from datetime import UTC, datetime, timedelta, timezone

from sharedstream.ops.offsets import GroupPositions, PartitionPosition
from sharedstream.web.caches import Refreshed
from sharedstream.web.charts import lag_chart
from sharedstream.web.live import LiveGroup, lag_source, merged_lags, unowned
from sharedstream.web.pages import from_ms, when


def _ticks(svg: str) -> list[str]:
    return re.findall(r'text-anchor="end" font-size="11" fill="#6b7280">([^<]*)<', svg)


def test_the_lag_axis_has_whole_number_ticks_only() -> None:
    for peak, expected in ((0, ["0", "1"]), (1, ["0", "1"]), (2, ["0", "1", "2"]),
                           (3, ["0", "1", "2", "3", "4", "5"]),
                           (7, ["0", "2", "4", "6", "8", "10"]),
                           (17, ["0", "5", "10", "15", "20"]),
                           (300, ["0", "125", "250", "375", "500"])):
        svg, _ = lag_chart({("t", 0): [(100.0, peak)]}, 100.0, 3600)
        assert _ticks(svg) == expected, peak


def test_lines_of_equal_lag_stay_visible_and_say_their_source() -> None:
    flat = [(90.0, 0), (100.0, 0)]
    svg, lines = lag_chart({("t", p): flat for p in range(3)}, 100.0, 3600,
                           {("t", 0): "triggerer", ("t", 1): "triggerer", ("t", 2): "kafka"})
    widths = [float(w) for w in re.findall(r'stroke-width="([\d.]+)"', svg)]
    assert widths == sorted(widths, reverse=True) and len(set(widths)) == 3
    assert len({line.dash for line in lines}) == 3  # each its own dash
    assert re.findall(r'data-source="(\w*)"', svg) == ["triggerer", "triggerer", "kafka"]
    assert [line.source for line in lines] == ["triggerer", "triggerer", "kafka"]


def test_every_time_is_iso_8601_utc_with_z() -> None:
    aware = datetime(2026, 5, 1, 14, 30, 5, 123, tzinfo=timezone(timedelta(hours=2)))
    assert when(aware) == "2026-05-01T12:30:05Z"
    assert when(datetime(2026, 5, 1, 12, 30, 5)) == "2026-05-01T12:30:05Z"  # naive = UTC
    assert from_ms(int(datetime(2026, 5, 1, 12, 30, 5, tzinfo=UTC).timestamp() * 1000)
                   ) == "2026-05-01T12:30:05Z"


def _positions(*lags: tuple[str, int, int]) -> GroupPositions:
    return GroupPositions("g", "Stable", 1, [PartitionPosition(t, p, 0, (), 0, lag)
                                             for t, p, lag in lags])


def test_the_broker_stands_in_for_each_partition_no_triggerer_reports() -> None:
    live = LiveGroup(members=[("a", {})], partitions={("t", 0): ("a", {"lag": 1}),
                                                      ("t", 1): ("a", {"lag": None})})
    positions = _positions(("t", 0, 9), ("t", 1, 4), ("t", 2, 2), ("old", 0, 7))
    assert merged_lags(live, positions) == {("t", 0): (1, "triggerer"), ("t", 1): (4, "kafka"),
                                            ("t", 2): (2, "kafka"), ("old", 0): (7, "kafka")}
    assert lag_source(["kafka", "triggerer"]) == "mixed"
    assert lag_source(["kafka"]) == "kafka" and lag_source([]) is None
    # Only the group's topics count, and only while some member answers; one that does
    # not (killed, most likely) hides nothing.
    assert unowned(live, positions, ["t"]) == [("t", 2)]
    assert unowned(LiveGroup(unreported=["b"]), positions, ["t"]) == []
    silent = LiveGroup(members=live.members, partitions=live.partitions, unreported=["b"])
    assert unowned(silent, positions, ["t"]) == [("t", 2)]


def test_an_old_value_is_answered_at_once_while_one_read_renews_it() -> None:
    release, renewing = threading.Event(), threading.Event()
    calls: list[str] = []

    def compute(key: str) -> int:
        calls.append(key)
        if len(calls) > 1:
            renewing.set()
            release.wait(30)
        return len(calls)

    cache: Refreshed[int] = Refreshed(compute, ttl=0.0)

    async def run() -> None:
        assert await cache.get("k", fresh=False) == 1  # the first read is waited for
        assert await cache.get("k", fresh=False) == 1  # old: answered, renewed behind
        assert renewing.wait(30)
        assert await cache.get("k", fresh=False) == 1  # one renewal in flight, not two
        assert calls == ["k", "k"]
        release.set()
        assert await cache.get("k", fresh=True) >= 2  # fresh: waits for a new read

    try:
        asyncio.run(run())
    finally:
        release.set()
        cache.close()

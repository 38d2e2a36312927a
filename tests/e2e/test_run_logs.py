"""What ``sharedstream run`` logs while it works and when it stops (issue 29, logs).

A real ``run`` on a real broker: progress lines every ``progress_interval`` per group,
named by its consumer group id (never the engine's key tuple), with the dead letters
written since the previous line; after SIGTERM a ``stopped`` line per group with what
was committed. ``progress_interval = 0`` prints none.
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from streams import committed, end_offsets, produce
from triggerer import Triggerer, until, write_config

PARTITIONS = 2
COUNT = 200  # ids 7 and 107 are rejected by picky: two dead letters
PROGRESS = (r"group {group}: (?P<rate>[\d.]+) msg/s, [\d.]+ events/s, "
            r"lag (?P<lag>\d+|\?), held (?P<held>\d+), dead-lettered (?P<dead>\d+)")


def progress_lines(log: str, group: str) -> list[re.Match[str]]:
    pattern = re.compile(PROGRESS.format(group=re.escape(group)))
    return [m for m in map(pattern.search, log.splitlines()) if m is not None]


def test_progress_and_stopped_lines_name_the_consumer_group(
        sqlite_url: str, kafka_bootstrap: str, create_topic: Callable[..., str],
        connection: dict[str, Any], triggerers: Callable[..., Triggerer],
        tmp_path: Path) -> None:
    topic = create_topic("logs", partitions=PARTITIONS)
    dlq = create_topic("logs-dlq")
    group = f"{connection['group.id']}.{topic}"
    config = write_config(tmp_path / "sharedstream.toml", database_url=sqlite_url,
                          connection=connection, triggerer={"progress_interval": 0.2})
    process = triggerers(config, env={"E2E_TOPIC": topic, "E2E_DLQ": dlq,
                                      "E2E_WATCHERS": "everything,picky"}).start()
    process.wait_ready()
    produce(kafka_bootstrap, topic, range(COUNT), PARTITIONS)
    ends = end_offsets(kafka_bootstrap, topic, PARTITIONS)
    until(lambda: committed(kafka_bootstrap, group, topic, PARTITIONS) == ends,
          f"committed offsets at the end of {topic}", interval=0.2)
    # Everything is committed, so the dead letters are written: a line printed from now on
    # closes the count. A quiet stream reads lag 0, held 0 once the broker reports lag.
    seen = len(progress_lines(process.log(), group))
    until(lambda: any(m["lag"] == "0" and m["held"] == "0"
                      for m in progress_lines(process.log(), group)[seen:]),
          "a progress line with lag 0, held 0 after the commit", interval=0.2)
    lines = progress_lines(process.log(), group)
    assert sum(int(m["dead"]) for m in lines) == 2, "\n".join(m[0] for m in lines)
    assert any(float(m["rate"]) > 0 for m in lines)

    process.signal(signal.SIGTERM)
    assert process.wait() == 0
    log = process.log()
    assert "SIGTERM: stopping" in log
    assert re.search(rf"stopped after \d+s: group {re.escape(group)} committed {COUNT} "
                     r"messages \(2 dead-lettered\), nothing left uncommitted", log), log[-3000:]
    assert re.search(rf"stopped: {2 * COUNT - 2} events persisted", log), log[-3000:]
    assert "('kafka-shared-stream'" not in log


def test_progress_interval_zero_prints_no_progress_line(
        sqlite_url: str, create_topic: Callable[..., str], connection: dict[str, Any],
        triggerers: Callable[..., Triggerer], tmp_path: Path) -> None:
    topic = create_topic("quiet")
    group = f"{connection['group.id']}.{topic}"
    config = write_config(tmp_path / "sharedstream.toml", database_url=sqlite_url,
                          connection=connection, triggerer={"progress_interval": 0})
    process = triggerers(config, env={"E2E_TOPIC": topic, "E2E_WATCHERS": "everything"}
                         ).start()
    process.wait_ready()
    process.signal(signal.SIGTERM)
    assert process.wait() == 0
    log = process.log()
    assert "stopped after" in log and f"group {group} committed 0 messages" in log, log
    assert not progress_lines(log, group), log



def logged_at(line: str) -> float:
    """The epoch time of a text log line (its local ``asctime``)."""
    return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()


def test_the_progress_lines_lag_is_at_most_one_interval_old(
        sqlite_url: str, kafka_bootstrap: str, create_topic: Callable[..., str],
        connection: dict[str, Any], triggerers: Callable[..., Triggerer],
        tmp_path: Path) -> None:
    """Issue 43: the lag came from librdkafka's statistics, whose log end stops moving
    while a partition is paused at its bound (here: a message held by a stuck watcher),
    and which say nothing of a partition never committed: the lines went on printing
    the lag of minutes before, or ``?``. Each line now asks the broker."""
    topic = create_topic("fresh-lag")
    group = f"{connection['group.id']}.{topic}"
    flag = tmp_path / "stuck.flag"
    flag.touch()
    interval = 1.0
    config = write_config(tmp_path / "sharedstream.toml", database_url=sqlite_url,
                          connection=connection,
                          triggerer={"progress_interval": interval, "max_in_flight": 5})
    process = triggerers(config, env={"E2E_TOPIC": topic, "E2E_WATCHERS": "stuck",
                                      "E2E_STUCK_IDS": "10", "E2E_STUCK_FLAG": str(flag)}
                         ).start()
    process.wait_ready()

    def lag_after(ids: range, expected: int) -> None:
        """Produce ``ids``; the first line logged one interval later says ``expected``."""
        produce(kafka_bootstrap, topic, ids, 1)
        produced = time.time()

        def later() -> list[str]:
            return [line for line in process.log().splitlines() if group in line
                    and PROGRESS_LINE.search(line) and logged_at(line) > produced + interval]

        first = until(later, "a progress line one interval after the produce",
                      timeout=30, interval=0.2)[0]
        lag = re.search(r"lag (\S+),", first)
        assert lag is not None and lag.group(1) == str(expected), first

    lag_after(range(10), 0)
    # Id 10 holds the floor: what is above it is lag, and the partition pauses at its
    # bound (5 in flight) while more is written.
    lag_after(range(10, 40), 30)
    lag_after(range(40, 100), 90)
    flag.unlink()


PROGRESS_LINE = re.compile(r"msg/s, [\d.]+ events/s")

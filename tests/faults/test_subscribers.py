"""Slow and stuck subscribers: only they are failed; their sibling keeps going.

``stuck`` hangs on one id while a flag file exists; ``ack_timeout`` (3 s) fails
it for that message, its trigger is restarted and the message held for it
alone. ``slow`` sleeps on every message. The sibling's delivery rate is measured
alone (``--full`` only) and next to both (figures only: the assertion is about
behaviour, the sibling finishing every message while the stuck one still holds its
message).

A full subscriber queue pauses fetching (``subscriber_queue_size``)
instead of failing anyone, so the sibling is held back by a slow peer at most by
the queue bound; the figures show what that costs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from db_schemas import postgres_schema_url
from faultkit import Figures, Size, dead_letters
from streams import committed, create_schema, event_count, event_ids, events, produce
from triggerer import ORDERS, Triggerer, until, write_config

PARTITIONS = 3
# The slow watcher's time per message, by size: it must still be behind its sibling when
# the sibling has every message (asserted; about 100 of 3,000 done at 2 ms). Bounded, its
# own pass over the log is most of what the test waits for, so it sleeps no longer than
# that needs (its per-message cost on two loaded cores is a few ms above the sleep).
SLOW_SECONDS = {"bounded": 0.001, "full": 0.005}


def _sibling_rate(pg_url: str, kafka_bootstrap: str, topic: str, dlq: str,
                  connection: dict[str, Any], triggerers: Callable[..., Triggerer],
                  config_dir: Path, watchers: str, count: int,
                  env: dict[str, str], within: float = 120) -> tuple[Triggerer, float]:
    """Start a triggerer on ``count`` already produced messages; sibling events per second
    (waiting ``within`` seconds at most for the sibling to have every message)."""
    create_schema(pg_url)
    config = write_config(config_dir / "sharedstream.toml", database_url=pg_url,
                          connection=connection,
                          triggerer={"ack_timeout": 3.0, "subscriber_queue_size": 256,
                                     "max_attempts": 1000})
    produce(kafka_bootstrap, topic, range(count), PARTITIONS)
    process = triggerers(config, ORDERS, env={
        "E2E_TOPIC": topic, "E2E_DLQ": dlq, "E2E_WATCHERS": watchers, **env}).start()
    process.wait_ready()
    began = time.monotonic()
    until(lambda: event_count(pg_url, "sibling") == count, "sibling's events", within,
          interval=0.1)
    return process, count / (time.monotonic() - began)


def _alone_rate(database_url: str, kafka_bootstrap: str, create_topic: Callable[..., str],
                connection: dict[str, Any], triggerers: Callable[..., Triggerer],
                config_dir: Path, count: int) -> float:
    """The sibling's events per second with no other watcher, in a schema of its own."""
    config_dir.mkdir()
    alone_db = postgres_schema_url(database_url)
    try:
        alone, rate = _sibling_rate(next(alone_db), kafka_bootstrap,
                                    create_topic("alone", partitions=PARTITIONS),
                                    create_topic("alone-dlq"), connection, triggerers,
                                    config_dir, "sibling", count, {})
        alone.kill()
    finally:
        next(alone_db, None)
    return rate


def test_slow_and_stuck_watchers_fail_alone_and_the_sibling_finishes(
        database_url: str, pg_url: str, kafka_bootstrap: str,
        create_topic: Callable[..., str], connection: dict[str, Any],
        triggerers: Callable[..., Triggerer], tmp_path: Path, size: Size,
        figures: Figures) -> None:
    count = size.pick(3_000, 30_000)
    busy_dir = tmp_path / "busy"
    busy_dir.mkdir()
    # The sibling's rate alone is a figure to compare with, asserted nowhere (rates live
    # in bench/): only --full pays for its own triggerer and log.
    alone_rate = _alone_rate(database_url, kafka_bootstrap, create_topic, connection,
                             triggerers, tmp_path / "alone", count) if size.full else None

    topic = create_topic("busy", partitions=PARTITIONS)
    dlq = create_topic("busy-dlq")
    flag = tmp_path / "stuck.flag"
    flag.touch()
    stuck_id = count // 3
    slow_seconds = SLOW_SECONDS[size.mode]
    # The sibling runs at most max_in_flight (10,000) messages ahead of the slow watcher
    # (guarantee 4), so with 30,000 messages it finishes at the slow watcher's pace: the
    # wait allows for the slow watcher's own time over the whole log.
    process, busy_rate = _sibling_rate(
        pg_url, kafka_bootstrap, topic, dlq, connection, triggerers, busy_dir,
        "sibling,slow,stuck", count,
        {"E2E_SLOW_SECONDS": str(slow_seconds), "E2E_STUCK_IDS": str(stuck_id),
         "E2E_STUCK_FLAG": str(flag)}, within=60 + count * slow_seconds)
    # The fault landed: when the sibling had every message, the slow watcher was still
    # behind it.
    slow_when_sibling_done = event_count(pg_url, "slow")
    # The sibling has everything; the stuck watcher still holds its message, and the
    # partition's commits stop right at it.
    group = f"{connection['group.id']}.{topic}"
    stuck_partition, stuck_offset = stuck_id % PARTITIONS, stuck_id // PARTITIONS
    until(lambda: len(event_ids(events(pg_url), "stuck")) == count - 1
          and len(event_ids(events(pg_url), "slow")) == count,
          "every other message kept by stuck and slow", 120, interval=0.3)
    assert stuck_id not in event_ids(events(pg_url), "stuck")
    until(lambda: committed(kafka_bootstrap, group, topic, PARTITIONS)[stuck_partition]
          == stuck_offset, "commits up to the stuck message", 60, interval=0.3)
    timeouts = [line for line in process.log().splitlines() if ": ack timeout" in line]
    held = time.monotonic()
    flag.unlink()
    until(lambda: event_ids(events(pg_url), "stuck").get(stuck_id) == 1,
          "the stuck message kept once released", 60, interval=0.3)
    recovered = time.monotonic() - held
    found = events(pg_url)
    lost = sum(len(set(range(count)) - set(event_ids(found, w)))
               for w in ("sibling", "slow", "stuck"))
    dups = sum(n - 1 for w in ("sibling", "slow", "stuck")
               for n in event_ids(found, w).values())
    figures.record("slow + stuck subscribers (ack_timeout 3 s)", messages=count,
                   faults=2, lost=lost, duplicates=dups, recover_seconds=recovered,
                   **({} if alone_rate is None else {"sibling_alone_per_s": round(alone_rate)}),
                   sibling_with_slow_and_stuck_per_s=round(busy_rate),
                   ack_timeout_log_lines=len(timeouts),
                   slow_done_when_sibling_done=slow_when_sibling_done)
    assert slow_when_sibling_done < count, "the slow watcher kept up with its sibling"
    assert timeouts and all("'stuck'" in line for line in timeouts), timeouts
    assert (lost, dups) == (0, 0)
    assert dead_letters(kafka_bootstrap, dlq) == []
    assert process.running()

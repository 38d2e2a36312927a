"""Soak: steady traffic through one triggerer; its RSS must level off, not grow without bound.

Bounded (CI): 30 s, RSS sampled every 2 s. ``--soak MINUTES``: that long, every
10 s. After a warm-up (the first third), the median RSS of the last third must
be within 20 % of the middle third's: a leak of the per-message kind grows
linearly with traffic and fails that; a cache filling once does not.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from faultkit import Figures, Size, wait_committed_end
from streams import create_schema, event_count, produce
from triggerer import ORDERS, Triggerer, write_config

PARTITIONS = 3


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


def test_steady_traffic_rss_levels_off(
        pg_url: str, kafka_bootstrap: str, create_topic: Callable[..., str],
        connection: dict[str, Any], triggerers: Callable[..., Triggerer], tmp_path: Path,
        size: Size, figures: Figures) -> None:
    seconds = size.soak_minutes * 60 if size.soak_minutes else 30.0
    interval = 10.0 if size.soak_minutes else 2.0
    topic = create_topic("soak", partitions=PARTITIONS)
    create_schema(pg_url)
    config = write_config(tmp_path / "sharedstream.toml", database_url=pg_url,
                          connection=connection)
    process = triggerers(config, ORDERS, env={"E2E_TOPIC": topic,
                                              "E2E_WATCHERS": "everything"}).start()
    process.wait_ready()
    stop = threading.Event()
    sent = [0]

    def traffic() -> None:
        while not stop.is_set():  # ~1,000 messages/s in bursts of 500
            produce(kafka_bootstrap, topic, range(sent[0], sent[0] + 500), PARTITIONS)
            sent[0] += 500
            stop.wait(0.5)

    producer = threading.Thread(target=traffic)
    producer.start()
    samples: list[tuple[float, float]] = []
    began = time.monotonic()
    while time.monotonic() - began < seconds:
        samples.append((round(time.monotonic() - began), round(rss_mib(process.pid), 1)))
        stop.wait(interval)
    stop.set()
    producer.join(60)
    wait_committed_end(kafka_bootstrap, f"{connection['group.id']}.{topic}", topic,
                       PARTITIONS, 120)
    third = len(samples) // 3
    middle = statistics.median(r for _, r in samples[third:2 * third])
    last = statistics.median(r for _, r in samples[2 * third:])
    kept = event_count(pg_url, "everything")
    figures.record("soak (steady traffic, RSS)", messages=sent[0], faults=0,
                   lost=sent[0] - kept, duplicates=max(0, kept - sent[0]),
                   recover_seconds=None, seconds=round(seconds),
                   rss_mib_over_time=samples, rss_growth_pct=round(100 * (last / middle - 1), 1))
    assert kept == sent[0]
    assert last <= middle * 1.2, samples

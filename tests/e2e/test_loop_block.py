"""A filter that blocks the event loop is seen: a warning naming it, metrics, readiness.

One event loop runs every watcher of a process, so a filter that calls a blocking
function (``time.sleep`` here) freezes them all. The process must say so from a
thread the block cannot freeze: ``/readyz`` answers 503 naming the blocked loop and
the watcher while the block lasts longer than ``[triggerer] loop_block_timeout``, the
log names the watcher and, once the loop runs again, how long it was blocked, and
``/metrics`` counts the block. The block lasts until the test removes a flag file, so
every check happens while it is certainly going on (no timing guess).
"""

from __future__ import annotations

import json
import re
import signal
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from triggerer import WATCHERS, Triggerer, until, write_config

from kafka_writes import ordered_producer


def produce_documents(bootstrap: str, topic: str, documents: list[dict[str, Any]]) -> None:
    producer = ordered_producer(bootstrap)
    for document in documents:
        producer.produce(topic, json.dumps(document).encode())
    assert producer.flush(30) == 0


def metric(body: str, name: str, labels: str = "") -> float | None:
    found = re.search(rf"^{re.escape(name + labels)} (\S+)$", body, re.M)
    return float(found.group(1)) if found else None


def test_a_filter_blocking_the_loop_is_named_by_readiness_the_log_and_the_metrics(
        tmp_path: Path, kafka_bootstrap: str, connection: dict[str, Any],
        create_topic: Callable[..., str], triggerers: Callable[..., Triggerer]) -> None:
    topic, flag, db = create_topic("loop"), tmp_path / "block", tmp_path / "state.db"
    flag.touch()
    config = write_config(tmp_path / "sharedstream.toml", database_url=f"sqlite:///{db}",
                          connection=connection, triggerer={"loop_block_timeout": 1.0})
    process = triggerers(config, WATCHERS / "loop_blocker.py",
                         env={"E2E_TOPIC": topic, "E2E_BLOCK_FLAG": str(flag)}).start()
    process.wait_ready()
    produce_documents(kafka_bootstrap, topic, [{"id": 1, "block": True}, {"id": 2}])

    def blocked() -> str | None:
        status, body = process.get("/readyz")
        return body if status == 503 and "event loop blocked" in body else None

    reason = until(blocked, "/readyz 503 naming the blocked event loop", timeout=30)
    assert "watcher 'blocker'" in reason, reason
    process.wait_log(r"WARNING.*event loop blocked for [\d.]+ ?s by watcher 'blocker'")
    during = process.get("/metrics")[1]
    assert metric(during, "sharedstream_event_loop_blocks_total", '{watcher="blocker"}') == 1.0
    lag = metric(during, "sharedstream_event_loop_lag_seconds")
    assert lag is not None and lag >= 1.0, lag  # the fault landed: the loop is not running
    assert process.get("/livez")[0] == 200  # blocked, not dead: no restart wanted

    flag.unlink()
    process.wait_ready()
    ended = process.wait_log(r"event loop ran again after ([\d.]+) ?s")
    assert float(ended.group(1)) >= 1.0
    # The loop runs again for everyone: both watchers' events for both messages.
    until(lambda: sqlite3.connect(db).execute(
        "SELECT count(*) FROM asset_event").fetchone()[0] == 4, "4 events after the block")
    after = process.get("/metrics")[1]
    assert metric(after, "sharedstream_event_loop_blocks_total", '{watcher="blocker"}') == 1.0
    seconds = metric(after, "sharedstream_event_loop_blocked_seconds_total",
                     '{watcher="blocker"}')
    assert seconds is not None and seconds >= 1.0, seconds
    process.signal(signal.SIGTERM)
    assert process.wait() == 0

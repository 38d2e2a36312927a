"""``sharedstream demo`` end to end, as a first-time user runs it (a subprocess).

The demo is the one place librdkafka's mock cluster is allowed, so this
unit test needs no services. A short run with a short outage, then the JSON summary
and the demo's own SQLite file are checked: what the view claims must be what
actually landed.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, Any], str]:
    tmp = tmp_path_factory.mktemp("demo")
    done = subprocess.run(
        [sys.executable, "-c", "from sharedstream.cli import main; main()",
         "demo", "--seconds", "6", "--outage", "1.5", "--json", "--keep"],
        capture_output=True, text=True, timeout=80,
        env={**os.environ, "TMPDIR": str(tmp)}, cwd=tmp, check=False)
    return done.returncode, json.loads(done.stdout), done.stderr


def _paid_max_ids(database_url: str) -> dict[str, int]:
    path = database_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT partition, payload FROM asset_event "
                          "WHERE watcher = 'paid_orders'").fetchall()
    out: dict[str, int] = {}
    for partition, payload in rows:
        out[str(partition)] = max(out.get(str(partition), 0), json.loads(payload)["id"])
    return out


def test_demo_exits_cleanly_with_a_summary(demo: tuple[int, dict[str, Any], str]) -> None:
    code, summary, stderr = demo
    assert code == 0, stderr
    assert summary["exit_code"] == 0
    assert Path(summary["log_file"]).is_file()
    assert "Traceback" not in stderr


def _event_rows(database_url: str) -> dict[str, tuple[int, int]]:
    """Per watcher: events in the demo's database, and distinct coordinates among them."""
    path = database_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT watcher, count(*), count(DISTINCT topic || ':' || partition "
                          "|| ':' || \"offset\") FROM asset_event GROUP BY watcher").fetchall()
    return {watcher: (n, distinct) for watcher, n, distinct in rows}


def test_every_valid_order_is_one_event_in_the_database(
        demo: tuple[int, dict[str, Any], str]) -> None:
    """Checked against the demo's SQLite file and the broker's delivery reports, not
    against the summary's own event counts."""
    summary = demo[1]
    rows = _event_rows(summary["database_url"])
    # Every well-formed order, plus the one the fix made valid (replayed after the fix).
    valid_orders = sum(summary["produced"].values()) - summary["poison_sent"] + 1
    assert rows["valid_orders"] == (valid_orders, valid_orders)  # none lost, none twice
    paid, distinct_paid = rows["paid_orders"]
    assert 0 < paid == distinct_paid < valid_orders
    assert summary["events"] == {"valid_orders": valid_orders, "paid_orders": paid}


def test_poison_messages_are_dead_lettered_with_their_reason(
        demo: tuple[int, dict[str, Any], str]) -> None:
    dlq = demo[1]["dlq"]
    assert dlq["records"] == demo[1]["poison_sent"] == 2
    assert {"valid_orders": "not JSON"} in dlq["reasons"]
    assert {"valid_orders": "missing field 'amount'",
            "paid_orders": "missing amount"} in dlq["reasons"]


def test_watermark_per_partition_is_the_highest_persisted_id(
        demo: tuple[int, dict[str, Any], str]) -> None:
    summary = demo[1]
    persisted = _paid_max_ids(summary["database_url"])
    marks = summary["watermarks"]["paid_orders"]
    assert persisted, "no paid order was persisted"
    assert {f"last_seen/{p}": n for p, n in persisted.items()} == marks
    assert summary["paid_orders_max_id"] == persisted


def test_database_outage_observed_and_recovered(demo: tuple[int, dict[str, Any], str]) -> None:
    database = demo[1]["database"]
    assert database["outage_observed"] and database["failed_commits"] > 0
    assert database["recovered"]


def test_committed_offsets_reach_the_produced_counts(
        demo: tuple[int, dict[str, Any], str]) -> None:
    summary = demo[1]
    assert sum(summary["produced"].values()) > 0
    assert summary["committed"] == summary["produced"]
    assert summary["in_flight_at_end"] == summary["held_at_end"] == 0


def test_a_replay_after_the_fix_makes_its_events_behind_the_watermark(
        demo: tuple[int, dict[str, Any], str]) -> None:
    """The order without an amount, rejected by both watchers, replayed once the fix is
    deployed: each watcher has its event (from the database), ``paid_orders`` although
    its watermark had moved past the order's id, and the replay went through the replay
    topic (the orders topic holds only what the traffic produced)."""
    summary = demo[1]
    assert summary["replay"]["replayed"] == 1 and summary["replay"]["error"] is None
    path = summary["database_url"].removeprefix("sqlite:///")
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT watcher, topic, partition, payload FROM asset_event").fetchall()
    free = [(w, t, p, json.loads(v)) for w, t, p, v in rows if json.loads(v)["amount"] == 0.0]
    assert sorted(w for w, _, _, _ in free) == ["paid_orders", "valid_orders"]
    assert {t for _, t, _, _ in free} == {summary["topic"]}  # keyed by the original message
    partition, order = free[0][2], free[0][3]
    later = [json.loads(v)["id"] for w, _, p, v in rows if w == "paid_orders" and p == partition]
    assert max(later) > order["id"]  # the watermark was past it when the replay came
    assert summary["committed"] == summary["produced"]  # no replay went into the orders topic

"""``sharedstream events list|clean`` against SQLite and PostgreSQL."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from sqlalchemy.engine import make_url

from sharedstream.cli import cli
from sharedstream.statestore import events as events_module
from sharedstream.statestore.events import insert_events
from sharedstream.statestore.models import asset_event
from sharedstream.statestore.store import StateStore
from sharedstream.statestore.types import utcnow

Run = Callable[..., str]


@pytest.fixture
def store(db_url: str) -> StateStore:
    store = StateStore.from_url(db_url)
    store.upgrade()
    return store


@pytest.fixture
def run(db_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Run:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SHAREDSTREAM_CONFIG", raising=False)
    runner = CliRunner()

    def invoke(*args: str, code: int = 0) -> str:
        result = runner.invoke(cli, [*args, "--database-url", db_url])
        assert result.exit_code == code, result.output
        return result.stdout

    return invoke


def seed(store: StateStore, ages_hours: dict[tuple[str, str], list[float]]) -> None:
    """Events of (asset, watcher) created the given numbers of hours ago, offsets 0..n-1."""
    now = utcnow()
    rows = []
    for (asset_name, watcher), ages in ages_hours.items():
        asset_id = store.register_asset(asset_name)
        rows += [{"asset_id": asset_id, "watcher": watcher, "payload": json.dumps({"n": i}),
                  "topic": "orders", "topic_id": "tid", "partition": i % 2, "offset": i,
                  "event_index": 0, "created_at": now - timedelta(hours=age)}
                 for i, age in enumerate(ages)]
    with store.engine.begin() as connection:
        insert_events(connection, rows)


def count(store: StateStore) -> int:
    with store.engine.connect() as connection:
        return int(connection.execute(
            sa.select(sa.func.count()).select_from(asset_event)).scalar_one())


def listed(run: Run, *args: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(run("events", "list", *args, "--json"))["items"]
    return items


def test_list_newest_committed_first_with_filters(store: StateStore, run: Run) -> None:
    """Newest first is the last committed first (the highest id), as the console, `events
    tail` and the destinations order events; `--since` still filters by creation time."""
    seed(store, {("orders", "w_orders"): [5, 1, 3], ("payments", "w_pay"): [2, 48]})
    events = listed(run)
    assert [(e["asset"], e["offset"]) for e in events] == [
        ("payments", 1), ("payments", 0), ("orders", 2), ("orders", 1), ("orders", 0)]
    first = events[-2]
    assert first == first | {"watcher": "w_orders", "topic": "orders", "topic_id": "tid",
                             "partition": 1, "event_index": 0, "payload": {"n": 1}}
    assert [e["offset"] for e in listed(run, "--asset", "orders")] == [2, 1, 0]
    assert [e["asset"] for e in listed(run, "--watcher", "w_pay")] == ["payments", "payments"]
    assert [(e["asset"], e["offset"]) for e in listed(run, "--since", "4h")] == [
        ("payments", 0), ("orders", 2), ("orders", 1)]
    cutoff = (utcnow() - timedelta(hours=24)).isoformat()
    assert len(listed(run, "--since", cutoff)) == 4
    assert len(listed(run, "--limit", "2")) == 2
    assert listed(run, "--asset", "nope") == []
    table = run("events", "list", "--asset", "orders")
    assert "w_orders" in table and "orders[1]@1" in table and '{"n":1}' in table


def test_list_says_how_many_match_not_how_many_it_shows(
        store: StateStore, run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    """The count of matching events, in the table's title and in --json (issue 43: the
    title said the page size); bounded, so that it stays cheap on a large table."""
    seed(store, {("orders", "w_orders"): [5, 1, 3, 4], ("payments", "w_pay"): [2, 48]})
    answer = json.loads(run("events", "list", "--limit", "2", "--json"))
    assert (len(answer["items"]), answer["total"], answer["total_exact"]) == (2, 6, True)
    answer = json.loads(run("events", "list", "--asset", "orders", "--limit", "1", "--json"))
    assert (answer["total"], answer["total_exact"], answer["limit"]) == (4, True, 1)
    assert json.loads(run("events", "list", "--watcher", "w_pay", "--since", "3h",
                          "--json"))["total"] == 1
    assert "asset events: 2 shown of 6 (newest first)" in run("events", "list", "--limit",
                                                               "2")
    monkeypatch.setattr(events_module, "COUNT_CAP", 3)
    answer = json.loads(run("events", "list", "--limit", "1", "--json"))
    assert (answer["total"], answer["total_exact"]) == (3, False)
    assert "1 shown of more than 3" in run("events", "list", "--limit", "1")


def test_clean_in_batches_and_dry_run(store: StateStore, run: Run, tmp_path: Path) -> None:
    seed(store, {("orders", "w"): [30, 31, 32, 33, 34, 1, 2]})
    config = tmp_path / "batching.toml"
    config.write_text("[state_store]\nstate_cleanup_batch_size = 2\n")
    dry = json.loads(run("events", "clean", "--older-than", "1d", "--dry-run", "--json",
                         "--config", str(config)))
    assert (dry["rows"], dry["batches"], dry["dry_run"]) == (5, 3, True)
    assert count(store) == 7
    started = time.perf_counter()
    report = json.loads(run("events", "clean", "--older-than", "1d", "--json",
                            "--config", str(config)))
    elapsed = time.perf_counter() - started
    assert (report["rows"], report["batches"], report["dry_run"]) == (5, 3, False)
    assert 0 < report["seconds"] <= elapsed  # the run's own duration, in seconds
    assert sorted(e["offset"] for e in listed(run)) == [5, 6]
    again = json.loads(run("events", "clean", "--older-than", "1d", "--json",
                           "--config", str(config)))
    assert (again["rows"], again["batches"]) == (0, 0)
    assert "deleted 2 asset events" in run("events", "clean", "--older-than", "30m")
    assert count(store) == 0


def test_clean_in_one_statement_by_default(store: StateStore, run: Run) -> None:
    seed(store, {("orders", "w"): [30, 40, 50, 1]})
    report = json.loads(run("events", "clean", "--older-than", "1d", "--json"))
    assert (report["rows"], report["batches"]) == (3, 1)
    assert count(store) == 1
    forced = json.loads(run("events", "clean", "--older-than", "1m", "--batch-size", "1",
                            "--dry-run", "--json"))
    assert (forced["rows"], forced["batches"]) == (1, 1)


def test_database_without_schema_is_a_runtime_error(db_url: str, run: Run) -> None:
    """An existing database without the schema: exit 1, pointing to ``db upgrade`` (a
    SQLite file that does not exist is a usage error instead, never created by reading:
    tests/e2e/test_cli_errors.py)."""
    url = make_url(db_url)
    if url.get_backend_name() == "sqlite":
        Path(str(url.database)).touch()
    run("events", "list", code=1)


def test_tail_prints_the_newest_in_commit_order_and_resumes_after_a_cursor(
        store: StateStore, run: Run) -> None:
    seed(store, {("orders", "w_orders"): [5, 4, 3], ("payments", "w_pay"): [2, 1]})
    lines = [json.loads(line) for line in run("events", "tail", "-n", "3", "--json").splitlines()]
    ids = [e["id"] for e in lines]
    assert ids == sorted(ids) and len(ids) == 3
    # --since is a cursor: everything after it, then the command ends (no --follow).
    after = [json.loads(line) for line in
             run("events", "tail", "--since", str(ids[0]), "--json").splitlines()]
    assert [e["id"] for e in after] == ids[1:]
    only = run("events", "tail", "--asset", "payments", "--since", "0").splitlines()
    assert len(only) == 2 and all("payments" in line for line in only)

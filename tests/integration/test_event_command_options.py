"""One spelling per concept in the event commands, against SQLite, PostgreSQL and MariaDB
(issue 29): ``--limit`` on list and tail, ``--since`` a time or an event id on both, and
every timestamp printed as ISO 8601 UTC with ``Z``."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from sharedstream.cli import cli
from sharedstream.statestore.events import insert_events
from sharedstream.statestore.store import StateStore
from sharedstream.statestore.types import utcnow

Run = Callable[..., str]
STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


@pytest.fixture
def run(db_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Run:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SHAREDSTREAM_CONFIG", raising=False)
    runner = CliRunner()

    def invoke(*args: str) -> str:
        result = runner.invoke(cli, [*args, "--database-url", db_url])
        assert result.exit_code == 0, result.output
        return result.stdout

    return invoke


@pytest.fixture
def ids(db_url: str) -> list[int]:
    """Four events of asset ``orders``, created 5, 3, 1 and 0.5 hours ago; their ids."""
    store = StateStore.from_url(db_url)
    store.upgrade()
    asset_id = store.register_asset("orders")
    now = utcnow()
    rows = [{"asset_id": asset_id, "watcher": "w", "payload": json.dumps({"n": i}),
             "topic": "orders", "topic_id": "tid", "partition": 0, "offset": i,
             "event_index": 0, "created_at": now - timedelta(hours=age)}
            for i, age in enumerate([5, 3, 1, 0.5])]
    with store.engine.begin() as connection:
        insert_events(connection, rows)
    listed = json.loads(invoke_json(store))["items"]
    return sorted(e["id"] for e in listed)


def invoke_json(store: StateStore) -> str:
    result = CliRunner().invoke(cli, ["events", "list", "--json", "--database-url",
                                      store.engine.url.render_as_string(hide_password=False)])
    assert result.exit_code == 0, result.output
    return result.stdout


def offsets(lines: str) -> list[int]:
    return [json.loads(line)["offset"] for line in lines.splitlines()]


def test_tail_since_takes_a_time_or_an_id(run: Run, ids: list[int]) -> None:
    assert offsets(run("events", "tail", "--since", "2h", "--json")) == [2, 3]
    cutoff = (utcnow() - timedelta(hours=4)).isoformat()
    assert offsets(run("events", "tail", "--since", cutoff, "--json")) == [1, 2, 3]
    assert offsets(run("events", "tail", "--since", str(ids[1]), "--json")) == [2, 3]


def test_list_since_takes_an_id_or_a_time(run: Run, ids: list[int]) -> None:
    listed = json.loads(run("events", "list", "--since", str(ids[1]), "--json"))["items"]
    assert [e["offset"] for e in listed] == [3, 2]
    assert [e["offset"] for e in json.loads(run("events", "list", "--since", "2h",
                                                 "--json"))["items"]] == [3, 2]


def test_tail_limit_and_its_old_spellings(run: Run, ids: list[int]) -> None:
    assert offsets(run("events", "tail", "--limit", "2", "--json")) == [2, 3]
    for old in ("-n", "--lines"):
        assert offsets(run("events", "tail", old, "2", "--json")) == [2, 3]


def test_every_event_timestamp_is_iso_utc_with_z(run: Run, ids: list[int]) -> None:
    listed = json.loads(run("events", "list", "--json"))["items"]
    assert all(STAMP.fullmatch(e["created_at"]) for e in listed), listed
    tailed = [json.loads(line) for line in run("events", "tail", "--json").splitlines()]
    assert all(STAMP.fullmatch(e["created_at"]) for e in tailed), tailed
    for text in (run("events", "tail"), run("events", "list")):
        found = re.findall(r"\d{4}-\d\d-\d\d[T ][\d:.+Z]+", text)
        assert len(found) == 4 and all(STAMP.fullmatch(s) for s in found), text

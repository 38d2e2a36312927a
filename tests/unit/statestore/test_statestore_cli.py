"""The ``db`` and ``state-store`` commands on SQLite: output, --json, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from sharedstream.cli import cli


@pytest.fixture
def run(tmp_path: Path):  # type: ignore[no-untyped-def]
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    runner = CliRunner()

    def invoke(*args: str, code: int = 0) -> str:
        result = runner.invoke(cli, [*args, "--database-url", url])
        assert result.exit_code == code, result.output + (result.stderr or "")
        return result.stdout

    invoke("db", "upgrade")
    return invoke


TASK = ("--dag-id", "d", "--run-id", "r", "--task-id", "t", "--map-index", "2")


def test_db_upgrade_json(run) -> None:  # type: ignore[no-untyped-def]
    data = json.loads(run("db", "upgrade", "--json"))
    assert data["from"] == data["to"] == "0008"


def test_task_and_asset_round_trip(run) -> None:  # type: ignore[no-untyped-def]
    run("state-store", "set", "job", '{"id": "j-42"}', *TASK, "--retention", "never")
    assert json.loads(run("state-store", "get", "job", *TASK)) == {"id": "j-42"}
    listed = json.loads(run("state-store", "list", *TASK, "--json"))
    assert [(e["key"], e["expires_at"]) for e in listed] == [("job", None)]
    run("state-store", "set", "wm", "42", "--asset", "orders")
    listed = json.loads(run("state-store", "list", "--asset", "orders", "--json"))
    assert [(e["key"], e["value"], e["writer_kind"], e["writer_id"]) for e in listed] == [
        ("wm", 42, "api", "cli")]
    assert "wm" in run("state-store", "list", "--asset", "orders")
    assert json.loads(run("state-store", "get", "wm", "--asset", "orders", "--json")) == {
        "key": "wm", "value": 42}
    run("state-store", "delete", "wm", "--asset", "orders")
    run("state-store", "delete", "wm", "--asset", "orders", code=1)
    run("state-store", "get", "wm", "--asset", "orders", code=1)


def test_stats_clean_sweep_json(run) -> None:  # type: ignore[no-untyped-def]
    run("state-store", "set", "k", "1", *TASK, "--retention", "1d")
    stats = json.loads(run("state-store", "stats", "--json"))
    assert stats["task_state_store"]["rows"] == 1
    assert stats["task_state_store"]["sizes"]["buckets"]["<=1KiB"] == 1
    assert "state stores" in run("state-store", "stats")
    clean = json.loads(run("state-store", "clean", "--dry-run", "--json"))
    assert (clean["rows"], clean["dry_run"]) == (0, True)
    sweep = json.loads(run("state-store", "sweep", "--inactive-for", "7d", "--json"))
    assert sweep["rows"] == 0


def test_usage_and_config_errors(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    run("state-store", "get", "k", code=2)  # no scope
    run("state-store", "get", "k", "--asset", "a", "--dag-id", "d", code=2)
    run("state-store", "set", "k", "not json", "--asset", "a", code=2)
    run("state-store", "set", "k", "1", "--asset", "a", "--retention", "1d", code=2)
    run("state-store", "sweep", "--inactive-for", "soon", code=2)
    bad = tmp_path / "bad.toml"
    bad.write_text('[state_store]\nbackend = ""\n')
    run("state-store", "stats", "--config", str(bad), code=2)
    run("state-store", "orphans", code=1)  # no payload backend configured


def test_orphans_with_config(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    config = tmp_path / "sharedstream.toml"
    config.write_text(f'[workers]\nstate_backend = "filesystem"\n'
                      f'state_dir = "{tmp_path / "payloads"}"\n')
    run("state-store", "set", "k", '"v"', *TASK, "--config", str(config))
    data = json.loads(run("state-store", "orphans", "--min-age", "0s", "--json",
                          "--config", str(config)))
    assert data == {"orphans": [], "deleted": 0}


def test_db_current_says_whether_the_schema_is_this_versions(tmp_path: Path, run) -> None:  # type: ignore[no-untyped-def]
    data = json.loads(run("db", "current", "--json"))
    assert data["current"] == data["head"] == "0008" and data["up_to_date"] is True
    empty = CliRunner().invoke(cli, ["db", "current", "--database-url",
                                     f"sqlite:///{tmp_path / 'empty.db'}"])
    assert empty.exit_code == 1 and "sharedstream db upgrade" in empty.stdout

"""``events`` and ``offsets`` commands without services: parsing, formatting, exit codes."""

from __future__ import annotations

import gc
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from sharedstream.cli import cli
from sharedstream.kafka.progress import decode_progress, encode_progress
from sharedstream.ops.events_commands import payload_preview
from sharedstream.ops.offsets import (
    PartitionPosition,
    format_ranges,
    group_topics,
    parse_reset_target,
)
from sharedstream.statestore.durations import MAX_DURATION, parse_duration, parse_instant

NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(("text", "expected"), [
    ("10m", NOW - timedelta(minutes=10)),
    ("2h", NOW - timedelta(hours=2)),
    ("7d", NOW - timedelta(days=7)),
    ("2024-04-30T08:00:00Z", datetime(2024, 4, 30, 8, tzinfo=UTC)),
    ("2024-04-30T10:00:00+02:00", datetime(2024, 4, 30, 8, tzinfo=UTC)),
    ("2024-04-30T08:00", datetime(2024, 4, 30, 8, tzinfo=UTC)),  # naive = UTC
    ("2024-04-30", datetime(2024, 4, 30, tzinfo=UTC)),
])
def test_parse_instant(text: str, expected: datetime) -> None:
    assert parse_instant(text, NOW) == expected


@pytest.mark.parametrize("text", ["", "soon", "10x", "2024-13-01"])
def test_parse_instant_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="ISO-8601"):
        parse_instant(text, NOW)


@pytest.mark.parametrize("text", ["1000000d", "36501d", "5300w", "99999999999999999999999d",
                                  "9" * 5000 + "s", "36500d1s"])
def test_a_duration_beyond_a_century_is_a_value_error(text: str) -> None:
    # Not an OverflowError from timedelta or from `now - d` (issue 41, 3.8).
    with pytest.raises(ValueError, match=r"at most 36500d \(100 years\)") as refused:
        parse_duration(text)
    assert len(str(refused.value)) < 200  # a 5,000-digit input is not echoed whole
    with pytest.raises(ValueError, match="at most 36500d"):
        parse_instant(text, NOW)


def test_the_longest_duration_reaches_back_from_any_now() -> None:
    assert parse_duration("0s") == parse_duration("00d") == timedelta(0)
    assert parse_duration("007m") == timedelta(minutes=7)
    assert parse_duration("36500d") == MAX_DURATION == timedelta(days=36500)
    assert parse_instant("36500d", NOW) == NOW - MAX_DURATION


@pytest.mark.parametrize("text", ["9999-12-31T23:59:59-05:00", "0001-01-01T00:00:00+01:00"])
def test_an_instant_beyond_what_utc_holds_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError, match="out of range in UTC"):
        parse_instant(text, NOW)


def test_an_instant_is_given_in_utc() -> None:
    parsed = parse_instant("2024-04-30T10:00:00+02:00", NOW)
    assert parsed.tzinfo is UTC and parsed == datetime(2024, 4, 30, 8, tzinfo=UTC)
    assert parse_instant("9999-12-31T23:59:59+05:00", NOW).tzinfo is UTC


def test_parse_reset_target() -> None:
    assert parse_reset_target("earliest", NOW) == "earliest"
    assert parse_reset_target(" LATEST ", NOW) == "latest"
    assert parse_reset_target("1h", NOW) == NOW - timedelta(hours=1)
    assert parse_reset_target("2024-05-01T11:00Z", NOW) == NOW - timedelta(hours=1)
    with pytest.raises(ValueError, match="not earliest, latest"):
        parse_reset_target("beginning", NOW)


@pytest.mark.parametrize(("offsets", "text"), [
    ([], ""), ([7], "7"), ([3, 4, 5, 8], "3-5,8"), ([9, 1, 2, 2, 10], "1-2,9-10"),
])
def test_format_ranges(offsets: list[int], text: str) -> None:
    assert format_ranges(offsets) == text


def test_group_topics_follow_the_consumer_group_naming() -> None:
    assert group_topics("sharedstream.orders", "sharedstream") == ["orders"]
    assert group_topics("app.v2.orders+payments", "app.v2") == ["orders", "payments"]
    assert group_topics("other.orders", "sharedstream") == []
    assert group_topics("sharedstream.", "sharedstream") == []


def test_lag_counts_from_the_log_start_without_a_commit() -> None:
    assert PartitionPosition("t", 0, 4, (6,), 0, 10).lag == 6
    assert PartitionPosition("t", 0, None, (), 3, 10).lag == 7
    assert PartitionPosition("t", 0, 12, (), 0, 10).lag == 0  # log truncated under it


def test_payload_preview() -> None:
    assert payload_preview({"id": 1}) == '{"id":1}'
    long = payload_preview({"text": "x" * 100}, width=20)
    assert len(long) == 20 and long.endswith("...")


def test_remembered_progress_round_trips_through_the_producer_encoding() -> None:
    # `offsets show` decodes with the producer's decoder; the encoder is the one that commits.
    assert decode_progress(5, encode_progress(5, [6, 7, 9])) == {6, 7, 9}


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> CliRunner:
    monkeypatch.chdir(tmp_path)  # no ./sharedstream.toml
    for name in ("SHAREDSTREAM_CONFIG", "SHAREDSTREAM_CONN_KAFKA_DEFAULT"):
        monkeypatch.delenv(name, raising=False)
    return CliRunner()


@pytest.mark.parametrize("args", [
    ["events", "list", "--since", "yesterday"],
    ["events", "list", "--limit", "0"],
    ["events", "clean"],
    ["events", "clean", "--older-than", "old"],
    ["offsets", "show"],
    ["offsets", "show", "--group", "g", "--watcher", "w"],
    ["offsets", "reset", "--group", "g"],
    ["offsets", "reset", "--group", "g", "--to", "beginning"],
    ["offsets", "reset", "--group", "g", "--to", "earliest", "--partition", "0"],
    ["offsets", "show", "--group", "g"],  # connection kafka_default not configured
    ["offsets", "show", "--group", "g", "--config", "missing.toml"],
])
def test_usage_and_config_errors_exit_2(runner: CliRunner, args: list[str]) -> None:
    result = runner.invoke(cli, args)
    assert result.exit_code == 2, result.output


def test_a_run_refused_at_start_up_leaves_collections_on(runner: CliRunner,
                                                         tmp_path: Path) -> None:
    """``run`` pauses the garbage collector for its start-up: one that fails before the
    watchers run (here: no watcher module) must not leave a process that goes on, such
    as an embedding program or this test session, without collections."""
    assert gc.isenabled()
    result = runner.invoke(cli, ["run", str(tmp_path / "missing.py")])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: ")
    assert gc.isenabled()


def test_unreachable_broker_is_one_line_and_never_shows_secrets(
        runner: CliRunner, tmp_path: Path) -> None:
    config = tmp_path / "sharedstream.toml"
    config.write_text('[connections.kafka_default]\n"bootstrap.servers" = "127.0.0.1:1"\n'
                      '"security.protocol" = "SASL_PLAINTEXT"\n"sasl.mechanism" = "PLAIN"\n'
                      '"sasl.username" = "ops"\n"sasl.password" = "hunter2-secret"\n')
    for args in (["offsets", "show", "--group", "g"],
                 ["offsets", "reset", "--group", "g", "--to", "earliest", "--yes"]):
        result = runner.invoke(cli, [*args, "--config", str(config), "--timeout", "1"])
        assert result.exit_code == 1, result.output
        assert result.stdout == ""
        assert result.stderr.startswith("error: kafka: ")
        assert result.stderr.count("\n") == 1
        assert "hunter2" not in result.output


def test_connection_errors_name_the_connection_not_its_secrets(
        runner: CliRunner, tmp_path: Path) -> None:
    config = tmp_path / "sharedstream.toml"
    config.write_text('[connections.kafka_default]\n"bootstrap.servers" = "127.0.0.1:1"\n'
                      '"enable.auto.commit" = true\n"sasl.password" = "hunter2-secret"\n')
    result = runner.invoke(cli, ["offsets", "show", "--group", "g", "--config", str(config)])
    assert result.exit_code == 2
    assert "kafka_default" in result.stderr and "hunter2" not in result.output


def test_watcher_without_a_recorded_group_is_a_runtime_error(
        runner: CliRunner, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    assert runner.invoke(cli, ["db", "upgrade", "--database-url", url]).exit_code == 0
    env = {"SHAREDSTREAM_CONN_KAFKA_DEFAULT": json.dumps({"bootstrap.servers": "127.0.0.1:1"})}
    result = runner.invoke(cli, ["offsets", "show", "--watcher", "nobody",
                                 "--database-url", url], env=env)
    assert result.exit_code == 1
    assert "watcher 'nobody' is in no recorded group" in result.stderr


@pytest.mark.parametrize(("args", "option"), [
    (["audit", "list", "--since", "1000000d"], "--since"),
    (["audit", "list", "--since", "9999-12-31T23:59:59-05:00"], "--since"),
    (["events", "list", "--since", "0001-01-01T00:00:00+01:00"], "--since"),
    (["events", "tail", "--since", "1000000d"], "--since"),
    (["events", "clean", "--older-than", "99999999999d"], "--older-than"),
    (["state-store", "sweep", "--inactive-for", "1000000d"], "--inactive-for"),
    (["state-store", "orphans", "--min-age", "1000000d"], "--min-age"),
    (["state-store", "set", "k", "1", "--dag-id", "d", "--run-id", "r", "--task-id", "t",
      "--retention", "1000000d"], "--retention"),
    (["offsets", "reset", "--group", "g", "--to", "1000000d"], "--to"),
    (["dlq", "inspect", "orders.dlq", "--since", "1000000d"], "--since"),
    (["dlq", "replay", "orders.dlq", "--until", "0001-01-01T00:00:00+01:00"], "--until"),
    (["audit", "list", "--since", "yesterday"], "--since"),
])
def test_a_time_out_of_range_is_one_error_line_exit_2(
        runner: CliRunner, tmp_path: Path, args: list[str], option: str) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    assert runner.invoke(cli, ["db", "upgrade", "--database-url", url]).exit_code == 0
    needs_db = args[0] in ("audit", "events", "state-store")
    env = {"SHAREDSTREAM_CONN_KAFKA_DEFAULT": json.dumps({"bootstrap.servers": "127.0.0.1:1"})}
    result = runner.invoke(cli, [*args, *(["--database-url", url] if needs_db else [])],
                           env=env)
    assert result.exit_code == 2, (result.output, result.exception)
    assert result.stdout == ""
    assert result.stderr.startswith(f"error: {option}: "), result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr

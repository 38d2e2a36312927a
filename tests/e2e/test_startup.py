"""``sharedstream run`` start-up, health and signals, as an operator meets them.

Every refused start exits with code 2 and one ``error:`` line naming the problem,
before anything runs. The ready/metrics/signal tests run a real process against
the real broker with SQLite (the database is not their subject).
"""

from __future__ import annotations

import json
import re
import signal
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import make_url
from streams import create_schema, produce
from triggerer import ORDERS, WATCHERS, Triggerer, run_cli, until, write_config

from sharedstream.triggerer.metrics import CATALOG

OFFLINE = {"bootstrap.servers": "127.0.0.1:1", "group.id": "e2e-offline"}


def refused(result: subprocess.CompletedProcess[str], *needles: str) -> str:
    """The one ``error:`` line of a refused start (exit 2), checked to name ``needles``."""
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])
    return errors[0]


def start(tmp_path: Path, watchers: Path | str, *, connection: dict[str, Any] = OFFLINE,
          database_url: str | None = None, env: dict[str, str] | None = None,
          args: tuple[str, ...] = (), triggerer: dict[str, Any] | None = None
          ) -> subprocess.CompletedProcess[str]:
    config = write_config(tmp_path / "sharedstream.toml",
                          database_url=database_url or f"sqlite:///{tmp_path / 'state.db'}",
                          connection=connection, triggerer=triggerer)
    return run_cli(["run", str(watchers), "--config", str(config), *args], cwd=tmp_path,
                   env=env)


def test_missing_watcher_file(tmp_path: Path) -> None:
    refused(start(tmp_path, tmp_path / "nowhere.py"), "not found", "nowhere.py")


def test_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    # Written here, not in watchers/: a file that does not parse would break the linters.
    broken = tmp_path / "broken.py"
    broken.write_text('"""A watcher module."""\n\nassets = [\n    1 +\n')
    refused(start(tmp_path, broken), f"{broken}:", "syntax error")
    line = refused(start(tmp_path, broken))
    assert re.search(r"broken\.py:\d+: syntax error", line), line


def test_duplicate_watcher_names(tmp_path: Path) -> None:
    refused(start(tmp_path, WATCHERS / "duplicate_names.py"), "'same_name'", "unique")


def test_asset_without_watchers(tmp_path: Path) -> None:
    refused(start(tmp_path, WATCHERS / "no_watchers.py"), "'lonely'", "no watchers")


def test_unserialisable_trigger(tmp_path: Path) -> None:
    refused(start(tmp_path, WATCHERS / "unserialisable.py"), "'forgetful'", "not serialisable")


def test_group_argument_conflict_names_both_watchers(tmp_path: Path) -> None:
    refused(start(tmp_path, WATCHERS / "dlq_conflict.py"),
            "'left_watcher'", "'right_watcher'", "dlq_topic")


def test_invalid_config_option_names_key_and_file(tmp_path: Path) -> None:
    line = refused(start(tmp_path, ORDERS, triggerer={"max_in_flight": 0},
                         env={"E2E_TOPIC": "t"}), "max_in_flight")
    assert str(tmp_path / "sharedstream.toml") in line, line
    refused(start(tmp_path, ORDERS, env={"E2E_TOPIC": "t", "SHAREDSTREAM__TRIGGERER__BOGUS": "1"}),
            "SHAREDSTREAM__TRIGGERER__BOGUS", "unknown option")


# A topic missing from the metadata is asked for again until broker_timeout (a broker
# just restarted may not list it yet): these tests want the refusal, not the wait.
SHORT_TOPIC_WAIT = {"SHAREDSTREAM__TRIGGERER__BROKER_TIMEOUT": "2"}


def test_auto_commit_connection_is_refused(tmp_path: Path) -> None:
    refused(start(tmp_path, ORDERS, connection={**OFFLINE, "enable.auto.commit": "true"},
                  env={"E2E_TOPIC": "t"}), "'e2e'", "enable.auto.commit")


def test_missing_topics_are_listed_in_one_error(
        tmp_path: Path, connection: dict[str, Any], create_topic: Callable[..., str]) -> None:
    present = create_topic("orders")
    line = refused(start(tmp_path, ORDERS, connection=connection,
                         env={"E2E_TOPIC": "e2e-no-such-topic", "E2E_DLQ": "e2e-no-such-dlq",
                              **SHORT_TOPIC_WAIT}),
                   "e2e-no-such-topic", "e2e-no-such-dlq")
    assert "missing topics" in line
    refused(start(tmp_path, ORDERS, connection=connection,
                  env={"E2E_TOPIC": present, "E2E_DLQ": "e2e-no-such-dlq", **SHORT_TOPIC_WAIT}),
            "e2e-no-such-dlq")
    # Refused before the database is written: nothing was created or recorded.
    assert not (tmp_path / "state.db").exists()


def test_a_different_watcher_set_is_refused_unless_takeover(
        tmp_path: Path, connection: dict[str, Any], create_topic: Callable[..., str],
        triggerers: Callable[..., Triggerer]) -> None:
    topic = create_topic("orders")
    config = write_config(tmp_path / "sharedstream.toml",
                          database_url=f"sqlite:///{tmp_path / 'state.db'}",
                          connection=connection)
    first = triggerers(config, env={"E2E_TOPIC": topic, "E2E_WATCHERS": "everything,evens"})
    first.start().wait_ready()
    first.signal(signal.SIGTERM)
    assert first.wait() == 0
    changed = {"E2E_TOPIC": topic, "E2E_WATCHERS": "everything,mirror"}
    refused(run_cli(["run", str(ORDERS), "--config", str(config)], cwd=tmp_path, env=changed),
            "adds ['mirror']", "drops ['evens']", "--takeover")
    second = triggerers(config, env=changed, args=("--takeover",))
    second.start().wait_ready()
    second.signal(signal.SIGTERM)
    assert second.wait() == 0


def test_a_database_at_an_unknown_revision_is_refused_even_with_upgrade(
        tmp_path: Path, connection: dict[str, Any], create_topic: Callable[..., str]) -> None:
    """Only one schema revision exists, so "older" cannot be built yet: a revision this
    version does not know (a newer sharedstream migrated the database) must be refused,
    and ``--upgrade`` must not try to migrate it. (Topics are checked first: they exist.)"""
    topic = create_topic("orders")
    url = f"sqlite:///{tmp_path / 'state.db'}"
    create_schema(url)
    engine = sa.create_engine(url)
    with engine.begin() as db:
        db.execute(sa.text("UPDATE alembic_version SET version_num = '9999_future'"))
    engine.dispose()
    for args in ((), ("--upgrade",)):
        refused(start(tmp_path, ORDERS, connection=connection, database_url=url,
                      env={"E2E_TOPIC": topic}, args=args),
                "9999_future", "unknown to this version")


def test_secrets_never_appear_in_any_output(
        tmp_path: Path, connection: dict[str, Any], database_url: str,
        create_topic: Callable[..., str], triggerers: Callable[..., Triggerer]) -> None:
    sasl, db_password = "sasl-hunter2-e2e", "db-hunter2-e2e"
    secret_connection = {**connection, "sasl.username": "someone", "sasl.password": sasl}
    with_password = make_url(database_url).set(password=db_password).render_as_string(
        hide_password=False)
    unreachable = make_url(with_password).set(port=1).render_as_string(hide_password=False)
    outputs = []
    for url, topic in ((with_password, "e2e-no-such-topic"), (unreachable, "t")):
        result = start(tmp_path, ORDERS, connection=secret_connection, database_url=url,
                       env={"E2E_TOPIC": topic, **SHORT_TOPIC_WAIT})
        assert result.returncode in (1, 2), result.stderr
        outputs.append(result.stdout + result.stderr)
    topic = create_topic("orders")
    config = write_config(tmp_path / "running.toml", database_url=with_password,
                          connection=secret_connection)
    process = triggerers(config, env={"E2E_TOPIC": topic, "E2E_WATCHERS": "everything"})
    process.start().wait_ready()
    outputs.append(process.get("/readyz")[1] + process.get("/metrics")[1])
    process.signal(signal.SIGTERM)
    assert process.wait() == 0
    outputs.append(process.log())
    for output in outputs:
        assert sasl not in output and db_password not in output, output


def test_readyz_503_while_the_cohort_is_incomplete_then_200_and_metrics(
        tmp_path: Path, connection: dict[str, Any], create_topic: Callable[..., str],
        triggerers: Callable[..., Triggerer]) -> None:
    topic, quit_flag = create_topic("orders"), tmp_path / "quitter-away"
    quit_flag.touch()
    config = write_config(tmp_path / "sharedstream.toml",
                          database_url=f"sqlite:///{tmp_path / 'state.db'}",
                          connection=connection,
                          triggerer={"retry_backoff_initial": 0.5, "retry_backoff_max": 0.5})
    process = triggerers(config, env={"E2E_TOPIC": topic, "E2E_WATCHERS": "everything,quitter",
                                      "E2E_QUIT_FLAG": str(quit_flag)}).start()
    assert process.get("/livez")[0] == 200
    until(lambda: process.log().count("its filter ended") >= 2, "the quitter leaving twice")
    status, body = process.get("/readyz")
    assert status == 503 and "quitter" in body, body
    quit_flag.unlink()
    process.wait_ready()
    group = f"{connection['group.id']}.{topic}"
    metrics = process.get("/metrics")[1]
    for gauge in ("sharedstream_group_polling", "sharedstream_in_flight_messages",
                  "sharedstream_queued_messages", "sharedstream_group_paused",
                  "sharedstream_broker_ready", "sharedstream_assigned_partitions"):
        assert re.search(rf'^{gauge}{{group="{re.escape(group)}"}} ', metrics, re.M), gauge
    assert f'sharedstream_group_polling{{group="{group}"}} 1.0' in metrics
    # Every family scraped is declared once in the catalog, with the help it declares.
    declared = {spec.full_name: spec.help for spec in CATALOG}
    scraped = {name.removesuffix("_total"): text for name, text in
               re.findall(r"^# HELP (sharedstream_\w+) (.*)$", metrics, re.M)}
    assert scraped == declared
    process.signal(signal.SIGTERM)
    assert process.wait() == 0


def test_second_sigterm_during_a_slow_shutdown_exits_at_once(
        tmp_path: Path, kafka_bootstrap: str, connection: dict[str, Any],
        create_topic: Callable[..., str], triggerers: Callable[..., Triggerer]) -> None:
    """The test holds an exclusive lock on the SQLite file, so the unit of work in flight
    cannot commit and the first SIGTERM's shutdown waits for it (deterministically). A
    short busy timeout makes the locked write fail (and be retried) at once, so the
    database reads as failing without waiting out the default 30 s."""
    topic, path = create_topic("orders"), tmp_path / "state.db"
    config = write_config(tmp_path / "sharedstream.toml", database_url=f"sqlite:///{path}",
                          connection=connection, triggerer={"shutdown_timeout": 120.0},
                          tables={"state_store": {"sqlite_busy_timeout": 0.2}})
    process = triggerers(config, env={"E2E_TOPIC": topic, "E2E_WATCHERS": "everything"}).start()
    process.wait_ready()
    lock = sqlite3.connect(path, isolation_level=None)
    try:
        lock.execute("BEGIN EXCLUSIVE")
        produce(kafka_bootstrap, topic, range(1), 1)
        until(lambda: process.get("/readyz")[0] == 503, "the database failing", 60)
        process.signal(signal.SIGTERM)
        process.wait_log("SIGTERM: stopping")
        assert process.running()  # the lock is held: the shutdown cannot have finished
        process.signal(signal.SIGTERM)
        # "At once" against the first shutdown, which waits for the locked unit of work
        # up to shutdown_timeout (120 s): 60 s tells them apart on a loaded machine.
        assert process.wait(60) == 1
    finally:
        lock.close()


def test_check_summarises_a_big_groups_watchers(
        tmp_path: Path, kafka_bootstrap: str, connection: dict[str, Any],
        create_topic: Callable[..., str]) -> None:
    """Issue 42: a group's watchers are counted and the first five named; all of them
    with --all-watchers."""
    topic = create_topic("orders")
    module = tmp_path / "many.py"
    module.write_text(
        "from sharedstream import Asset, AssetWatcher, KafkaSharedStreamTrigger\n"
        "assets = [Asset(f'a{i:02d}', watchers=[AssetWatcher(f'w{i:02d}', "
        f"KafkaSharedStreamTrigger(topics=[{topic!r}], kafka_config_id='e2e'))]) "
        "for i in range(12)]\n")
    config = write_config(tmp_path / "sharedstream.toml",
                          database_url=f"sqlite:///{tmp_path / 'state.db'}",
                          connection=connection)
    checked = run_cli(["check", str(module), "--config", str(config)], cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr
    group = f"ok: group {connection['group.id']}.{topic}: "
    assert (group + "12 watchers: w00, w01, w02, w03, w04 and 7 more (`sharedstream check "
            "--all-watchers` lists them all)") in checked.stdout.splitlines()
    every = run_cli(["check", str(module), "--config", str(config), "--all-watchers"],
                    cwd=tmp_path)
    assert every.returncode == 0, every.stderr
    assert group + ", ".join(f"w{i:02d}" for i in range(12)) in every.stdout.splitlines()


def test_check_reads_a_folder_of_modules_and_changes_nothing(
        tmp_path: Path, kafka_bootstrap: str, connection: dict[str, Any],
        create_topic: Callable[..., str]) -> None:
    topic = create_topic("orders")
    folder = tmp_path / "watchers"
    (folder / "more").mkdir(parents=True)
    for name, sub in (("one", folder), ("two", folder / "more")):
        (sub / f"{name}.py").write_text(
            "from sharedstream import Asset, AssetWatcher, KafkaSharedStreamTrigger\n"
            f"{name} = Asset({name!r}, watchers=[AssetWatcher({name!r}, "
            f"KafkaSharedStreamTrigger(topics=[{topic!r}], kafka_config_id='e2e'))])\n")
    (folder / "_helpers.py").write_text("raise RuntimeError('never imported')\n")
    database = tmp_path / "state.db"
    config = write_config(tmp_path / "sharedstream.toml", database_url=f"sqlite:///{database}",
                          connection=connection)
    checked = run_cli(["check", str(folder), "--config", str(config)], cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr
    assert f"ok: group {connection['group.id']}.{topic}: 2 watchers: one, two" in checked.stdout
    assert not database.exists()  # nothing created
    (folder / "more" / "two.py").write_text(
        (folder / "more" / "two.py").read_text().replace(topic, "e2e-no-such-topic"))
    refused(run_cli(["check", str(folder), "--config", str(config)], cwd=tmp_path,
                    env=SHORT_TOPIC_WAIT), "missing topics", "e2e-no-such-topic")


def test_json_logs_and_the_database_url_option(
        tmp_path: Path, kafka_bootstrap: str, connection: dict[str, Any],
        create_topic: Callable[..., str], triggerers: Callable[..., Triggerer]) -> None:
    """``--log-format json``: every line one JSON object, the group named where known;
    ``--database-url`` wins over the file's ``[database] url``."""
    topic = create_topic("orders")
    database = tmp_path / "from-option.db"
    config = write_config(tmp_path / "sharedstream.toml",
                          database_url=f"sqlite:///{tmp_path / 'from-file.db'}",
                          connection=connection)
    process = triggerers(config, env={"E2E_TOPIC": topic, "E2E_WATCHERS": "everything"},
                         args=("--log-format", "json", "--database-url",
                               f"sqlite:///{database}")).start()
    process.wait_ready()
    produce(kafka_bootstrap, topic, range(3), 1)
    until(lambda: database.exists() and "assigned" in process.log(), "the group assigned")
    process.signal(signal.SIGTERM)
    assert process.wait() == 0
    entries = [json.loads(line) for line in process.log().splitlines() if line.strip()]
    assigned = [e for e in entries if "assigned" in e["message"]]
    assert assigned and assigned[0]["group"] == f"{connection['group.id']}.{topic}"
    assert not (tmp_path / "from-file.db").exists()


def test_status_shows_partitions_and_held_messages_and_the_heartbeat_row(
        tmp_path: Path, kafka_bootstrap: str, connection: dict[str, Any],
        create_topic: Callable[..., str], triggerers: Callable[..., Triggerer]) -> None:
    topic = create_topic("orders")
    flag = tmp_path / "flaky.flag"
    flag.touch()
    database = tmp_path / "state.db"
    config = write_config(tmp_path / "sharedstream.toml", database_url=f"sqlite:///{database}",
                          connection=connection,
                          triggerer={"retry_backoff_initial": 30.0, "retry_backoff_max": 30.0})
    process = triggerers(config, env={"E2E_TOPIC": topic, "E2E_WATCHERS": "everything,flaky",
                                      "E2E_FLAKY_FLAG": str(flag)}).start()
    process.wait_ready()
    produce(kafka_bootstrap, topic, range(60), 1)

    def status() -> dict[str, Any]:
        code, body = process.get("/status")
        assert code == 200, body
        document: dict[str, Any] = json.loads(body)
        return document

    until(lambda: status()["groups"][0]["held"], "a held message in /status")
    [group] = status()["groups"]
    assert group["consumer_group"] == f"{connection['group.id']}.{topic}"
    assert group["cohort"] == ["everything", "flaky"]
    held = group["held"]  # ids 0 and 50 fail while the flag exists (one partition)
    assert {h["offset"] for h in held} <= {0, 50}
    assert all("flaky watcher fails" in h["reasons"]["flaky"] for h in held)
    assert all(0 < h["retry_in"] <= 30.0 for h in held)
    [partition] = group["partitions"]
    assert partition["floor"] == min(h["offset"] for h in held) == 0
    assert partition["held"] == len(held)
    with sqlite3.connect(database) as db:
        [(pid, status_url)] = db.execute("SELECT pid, status_url FROM triggerer_process")
    assert pid == process.pid and status_url.endswith(f":{process.port}/status")
    process.signal(signal.SIGTERM)
    assert process.wait() == 0
    with sqlite3.connect(database) as db:
        assert db.execute("SELECT COUNT(*) FROM triggerer_process").fetchone() == (0,)

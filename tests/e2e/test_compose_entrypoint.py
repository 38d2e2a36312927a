"""docker-compose.yml's triggerer, run as Compose would start it, against real services.

There is no Docker engine here, so the test takes what Compose would run from the
file itself: ``tools/composecheck -print-services`` loads docker-compose.yml with
compose-go (the loader of Docker Compose v2) and prints each service's effective
entrypoint, command, working directory and environment (the Dockerfile's
ENTRYPOINT and WORKDIR where the service sets none). The test runs that command
with that environment, translating only what belongs to the container's network
and filesystem:

* the service addresses: ``kafka:9092`` becomes the test broker; a database URL on
  the host ``postgres`` becomes the test database (a fresh schema), with the same
  driver;
* the health server's ``0.0.0.0`` becomes ``127.0.0.1``, and its port 0 (a free one,
  read from the log): the container's port is the container's own;
* paths under the image's ``/app`` (where the Dockerfile copies ``examples/``)
  become this checkout's, and ``sharedstream`` the helper's ``COMMAND``.

Everything else (the config file, the flags, every other variable) is passed as it
is, so events in the database prove the file plus the compose environment reach
Kafka and the database. The sample producer (``examples/produce_orders.py``) runs
with its compose environment too, for ten messages: eight orders (five paid), one
without an amount and one not JSON, the two dead-lettered.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import sqlalchemy as sa
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic  # where the type stubs declare it
from db_schemas import postgres_schema_url
from sqlalchemy.engine import make_url
from triggerer import COMMAND, Triggerers, until

from sharedstream.ops.dlq import read_dead_letters
from sharedstream.statestore.models import asset_event

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"
COMPOSECHECK = REPO / "tools" / "composecheck"
IMAGE_APP = PurePosixPath("/app")  # the Dockerfile's WORKDIR, a copy of examples/ in it
KAFKA_ADDRESS = "kafka:9092"  # the listener Kafka advertises to the other services
DATABASE_HOST = "postgres"
TOPICS = ("orders", "orders.dlq")  # what the kafka-init service creates
PARTITIONS = 3
MESSAGES = 10
# examples/produce_orders.py with --first-id 1: ids 1..10; id 5 has no amount, id 10
# is not JSON, ids 3, 6 and 8 are "new".
VALID_IDS = {1, 2, 3, 4, 6, 7, 8, 9}
PAID_IDS = {1, 2, 4, 7, 9}
# Rejections per dead letter: the order without an amount is rejected by paid_orders too
# (the demo's watchers, like the README's, dead-letter it so a fix can replay it).
REASONS = [{"valid_orders": "missing field 'amount'", "paid_orders": "missing amount"},
           {"valid_orders": "not JSON"}]


def go() -> str:
    found = shutil.which("go") or "/usr/local/go/bin/go"
    if not Path(found).exists():
        pytest.fail("this test reads docker-compose.yml through tools/composecheck, which "
                    "needs Go 1.24+ on PATH (or /usr/local/go/bin/go)", pytrace=False)
    return found


def compose_services(*names: str) -> dict[str, dict[str, Any]]:
    """What Compose would start for each service (composecheck checks the file first)."""
    result = subprocess.run(
        [go(), "run", ".", "-print-services", ",".join(names), str(COMPOSE_FILE)],
        cwd=COMPOSECHECK, env={**os.environ, "GOTOOLCHAIN": "local"},
        capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, f"composecheck refused docker-compose.yml:\n{result.stderr}"
    services: dict[str, dict[str, Any]] = json.loads(result.stdout)
    return services


def host_path(argument: str, working_dir: str) -> str:
    """An argument naming a file of the image's /app: the same file in this checkout."""
    in_image = PurePosixPath(working_dir) / argument
    if not in_image.is_relative_to(IMAGE_APP):
        return argument
    here = REPO.joinpath(*in_image.relative_to(IMAGE_APP).parts)
    return str(here) if here.is_file() else argument


def localize(environment: Mapping[str, str | None], *, kafka_bootstrap: str,
             database_url: str) -> tuple[dict[str, str], set[str]]:
    """The compose environment with the service addresses of this machine; also the
    names of the variables that were translated."""
    out: dict[str, str] = {}
    translated: set[str] = set()
    for name, value in environment.items():
        assert value is not None, f"{name} is taken from the host's environment"
        new = value
        if KAFKA_ADDRESS in value.split(","):
            new = ",".join(kafka_bootstrap if a == KAFKA_ADDRESS else a
                           for a in value.split(","))
        elif "://" in value and value.split("://", 1)[0].startswith("postgresql"):
            url = make_url(value)
            if url.host == DATABASE_HOST:
                test = make_url(database_url)
                assert url.drivername == test.drivername, (url.drivername, test.drivername)
                new = database_url
        elif name == "SHAREDSTREAM__TRIGGERER__HEALTH_HOST" and value in ("0.0.0.0", "::"):
            new = "127.0.0.1"
        elif name == "SHAREDSTREAM__TRIGGERER__HEALTH_PORT":
            new = "0"
        if new != value:
            translated.add(name)
        out[name] = new
    return out, translated


def recreate_topics(admin: AdminClient) -> None:
    """``orders`` and ``orders.dlq`` as kafka-init creates them, empty (the watcher
    module names these exact topics, so they cannot be made unique per test)."""
    existing = set(admin.list_topics(timeout=10).topics)
    if stale := [t for t in TOPICS if t in existing]:
        for future in admin.delete_topics(stale, operation_timeout=30).values():
            future.result(timeout=30)
    deadline = time.monotonic() + 30
    while True:
        futures = admin.create_topics(
            [NewTopic(t, num_partitions=PARTITIONS, replication_factor=1) for t in TOPICS],
            operation_timeout=30)
        try:
            for future in futures.values():
                future.result(timeout=30)
            break
        except KafkaException:  # a deletion still in progress
            if time.monotonic() > deadline:
                raise
            admin.delete_topics([t for t in TOPICS if t in set(admin.list_topics(
                timeout=10).topics)], operation_timeout=30)
            time.sleep(0.5)

    def led() -> bool:
        topics = admin.list_topics(timeout=5).topics
        return all(t in topics and topics[t].error is None
                   and len(topics[t].partitions) == PARTITIONS
                   and all(p.leader >= 0 for p in topics[t].partitions.values())
                   for t in TOPICS)

    until(led, "the topics' leaders", timeout=30)


@pytest.fixture
def compose_topics(kafka_admin: AdminClient) -> Iterator[None]:
    recreate_topics(kafka_admin)
    yield
    kafka_admin.delete_topics(list(TOPICS), operation_timeout=10)


@pytest.fixture
def schema_url(database_url: str) -> Iterator[str]:
    """A fresh schema: the example's watcher set is recorded there, apart from other tests'."""
    yield from postgres_schema_url(database_url)


def events_by_watcher(database_url: str) -> dict[str, list[Any]]:
    engine = sa.create_engine(database_url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(sa.select(asset_event.c.watcher, asset_event.c.payload)
                                      .order_by(asset_event.c.id)).all()
    except sa.exc.ProgrammingError:  # no schema yet
        return {}
    finally:
        engine.dispose()
    found: dict[str, list[Any]] = {}
    for watcher, payload in rows:
        found.setdefault(watcher, []).append(json.loads(payload))
    return found


def test_compose_triggerer_reaches_kafka_and_the_database(
        kafka_bootstrap: str, schema_url: str, compose_topics: None,
        triggerers: Triggerers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    services = compose_services("triggerer", "producer")
    triggerer, producer = services["triggerer"], services["producer"]

    # The image runs `sharedstream run WATCHERS --config FILE [flags]` in /app.
    assert triggerer["entrypoint"] == ["sharedstream"], triggerer["entrypoint"]
    command = [host_path(a, triggerer["working_dir"]) for a in triggerer["command"]]
    assert command[0] == "run" and command[2] == "--config", command
    watchers, config, flags = Path(command[1]), Path(command[3]), command[4:]
    assert watchers == REPO / "examples" / "orders_watchers.py", command
    assert config == REPO / "examples" / "sharedstream.toml", command

    # Nothing from this shell may configure the triggerer: only the compose environment.
    for name in list(os.environ):
        if name.startswith(("SHAREDSTREAM__", "SHAREDSTREAM_CONN_", "AIRFLOW_CONN_")) \
                or name == "SHAREDSTREAM_CONFIG":
            monkeypatch.delenv(name)
    env, translated = localize(triggerer["environment"], kafka_bootstrap=kafka_bootstrap,
                               database_url=schema_url)
    assert translated == {"SHAREDSTREAM_CONN_KAFKA_DEFAULT__BOOTSTRAP_SERVERS",
                          "SHAREDSTREAM__DATABASE__URL", "SHAREDSTREAM__TRIGGERER__HEALTH_HOST",
                          "SHAREDSTREAM__TRIGGERER__HEALTH_PORT"}, translated

    process = triggerers(config, watchers, env=env, args=tuple(flags))
    process.start()
    assert process.process is not None
    assert process.process.args == [*COMMAND, "run", str(watchers), "--config", str(config),
                                    *flags]
    # The group is "<group.id of the file>.<topics>": the file is read, the env wins.
    process.wait_log(r"sharedstream\.orders", timeout=30)
    process.wait_ready(timeout=30)

    # The sample producer, with its compose environment, for ten messages.
    assert producer["entrypoint"][0] == "python", producer["entrypoint"]
    script = host_path(producer["entrypoint"][1], producer["working_dir"])
    assert script == str(REPO / "examples" / "produce_orders.py"), producer["entrypoint"]
    producer_env, translated = localize(producer["environment"],
                                        kafka_bootstrap=kafka_bootstrap, database_url=schema_url)
    assert translated == {"KAFKA_BOOTSTRAP_SERVERS"}, translated
    produced = subprocess.run(
        [sys.executable, script, "--count", str(MESSAGES), "--interval", "0.05",
         "--first-id", "1"],
        env={**os.environ, **producer_env}, capture_output=True, text=True, timeout=60,
        check=False)
    assert produced.returncode == 0, produced.stdout + produced.stderr
    assert produced.stdout.count("produced orders[") == MESSAGES, produced.stdout

    def all_events() -> dict[str, list[Any]] | None:
        found = events_by_watcher(schema_url)
        counts = {w: len(e) for w, e in found.items()}
        done = counts == {"valid_orders": len(VALID_IDS), "paid_orders": len(PAID_IDS),
                          "orders_audit": MESSAGES}
        return found if done else None

    found = until(all_events, "every event in the database", timeout=30, interval=0.2)
    assert {e["id"] for e in found["valid_orders"]} == VALID_IDS
    assert {e["id"] for e in found["paid_orders"]} == PAID_IDS
    assert all(e["status"] == "paid" for e in found["paid_orders"])

    def dead_letters() -> dict[str, dict[str, str]] | None:
        reasons: dict[str, dict[str, str]] = {}
        for record in read_dead_letters({"bootstrap.servers": kafka_bootstrap}, "orders.dlq",
                                        timeout=5):
            assert record.identity is not None, record.problem
            reasons[record.identity] = dict(record.rejections)
        return reasons if len(reasons) == len(REASONS) else None

    reasons = until(dead_letters, "two dead letters", timeout=20, interval=0.5)
    assert sorted(reasons.values(), key=str) == sorted(REASONS, key=str)

    status, body = process.get("/readyz")
    assert status == 200, body
    process.signal(signal.SIGTERM)
    assert process.wait(40) == 0, process.log()[-4000:]


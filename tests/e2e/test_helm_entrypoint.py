"""The Helm chart's triggerer, run as its pod would run, against real services (issue 31).

There is no cluster here, so the test takes what the kubelet would start from the
chart itself (helm template): the container's args and environment, the
sharedstream.toml and the watcher module of the chart's ConfigMaps, and the pod's
terminationGracePeriodSeconds. It runs that command with that environment,
translating only what belongs to the pod:

* the ConfigMaps' mount paths become files of the test's directory;
* the Secret behind ``secrets.database.url`` holds the test database (a fresh schema);
* the downward API's pod IP is 127.0.0.1, and the health port 0 (a free one): the
  pod's port is the pod's own.

Events in the database prove the rendered file and environment reach Kafka and the
database; SIGTERM must end the process with 0 within the grace period the chart gives.
"""

from __future__ import annotations

import json
import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic  # where the type stubs declare it
from db_schemas import postgres_schema_url
from triggerer import Triggerers, until

from helm_render import config_map, containers, render
from kafka_writes import ordered_producer
from sharedstream.statestore.models import asset_event

MESSAGES = 5
SHUTDOWN_TIMEOUT = 10
CONFIG_PATH = "/etc/sharedstream/sharedstream.toml"
WATCHERS_PATH = "/etc/sharedstream/watchers"
POD_NAME = "release-sharedstream-triggerer-7d9f8c-x2vkq"  # what the downward API gives


@pytest.fixture
def topic(kafka_admin: AdminClient) -> Iterator[str]:
    name = f"helm-{uuid.uuid4().hex[:8]}"
    for future in kafka_admin.create_topics([NewTopic(name, 1, 1)]).values():
        future.result(timeout=30)
    yield name
    kafka_admin.delete_topics([name], operation_timeout=10)


@pytest.fixture
def schema_url(database_url: str) -> Iterator[str]:
    yield from postgres_schema_url(database_url)


def events(database_url: str) -> int:
    engine = sa.create_engine(database_url)
    try:
        with engine.connect() as connection:
            count: int = connection.execute(
                sa.select(sa.func.count()).select_from(asset_event)).scalar_one()
            return count
    except sa.exc.ProgrammingError:  # no schema yet
        return 0
    finally:
        engine.dispose()


def values_file(path: Path, *, kafka_bootstrap: str, topic: str) -> Path:
    source = (
        "from sharedstream import Asset, AssetWatcher, KafkaSharedStreamTrigger\n\n"
        f"orders = Asset('helm_orders', uri='kafka://{topic}', watchers=[\n"
        f"    AssetWatcher(name='helm_watcher',\n"
        f"                 trigger=KafkaSharedStreamTrigger(topics=['{topic}'])),\n"
        "])\n")
    values: dict[str, Any] = {
        "config": {
            "triggerer": {"shutdown_timeout": SHUTDOWN_TIMEOUT},
            "connections": {"kafka_default": {
                "bootstrap.servers": kafka_bootstrap, "group.id": f"helm-{uuid.uuid4().hex[:8]}",
                "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000}},
        },
        "secrets": {"database": {"url": {"secretName": "sharedstream-db", "key": "url"}}},
        "watchers": {"files": {"helm_orders.py": source}},
    }
    path.write_text(json.dumps(values), encoding="utf-8")  # JSON is YAML
    return path


def test_the_charts_triggerer_reaches_kafka_and_the_database_and_stops_in_its_grace(
        kafka_bootstrap: str, topic: str, schema_url: str, triggerers: Triggerers,
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    docs = render(values_file(tmp_path / "values.yaml", kafka_bootstrap=kafka_bootstrap,
                              topic=topic))
    [pod] = [doc["spec"]["template"]["spec"] for doc in docs if doc["kind"] == "Deployment"]
    [container] = containers(docs)

    # The ConfigMaps, where the pod mounts them.
    config = tmp_path / "sharedstream.toml"
    config.write_text(config_map(docs, "-config")["sharedstream.toml"], encoding="utf-8")
    watchers = tmp_path / "watchers"
    watchers.mkdir()
    for name, text in config_map(docs, "-watchers").items():
        (watchers / name).write_text(text, encoding="utf-8")

    args = container["args"]
    assert args[:4] == ["run", WATCHERS_PATH, "--config", CONFIG_PATH], args
    env: dict[str, str] = {}
    for variable in container["env"]:
        name = variable["name"]
        if "value" in variable:
            env[name] = variable["value"]
        elif variable["valueFrom"].get("fieldRef", {}).get("fieldPath") == "status.podIP":
            env[name] = "127.0.0.1"
        elif variable["valueFrom"].get("fieldRef", {}).get("fieldPath") == "metadata.name":
            env[name] = POD_NAME
        else:
            assert variable["valueFrom"]["secretKeyRef"] == {"name": "sharedstream-db",
                                                             "key": "url"}, variable
            env[name] = schema_url
    assert env.pop("SHAREDSTREAM_CONFIG") == CONFIG_PATH
    assert env["PYTHONPATH"] == WATCHERS_PATH
    # The watchers where the pod has them; what this run imports sharedstream from, after.
    env.update(PYTHONPATH=os.pathsep.join([str(watchers), os.environ.get("PYTHONPATH", "")]),
               SHAREDSTREAM__TRIGGERER__HEALTH_PORT="0")
    for name in ("SHAREDSTREAM_CONFIG", "SHAREDSTREAM__DATABASE__URL"):
        monkeypatch.delenv(name, raising=False)

    process = triggerers(config, watchers, env=env, args=tuple(args[4:]))
    process.start()
    process.wait_ready(timeout=30)
    # The pod's name is its static membership identity (a restart in the pod keeps it).
    assert f"static member {POD_NAME!r}" in process.log(), process.log()[-3000:]

    producer = ordered_producer(kafka_bootstrap)
    for number in range(MESSAGES):
        producer.produce(topic, json.dumps({"id": number}).encode())
    assert producer.flush(30) == 0
    until(lambda: events(schema_url) == MESSAGES, f"{MESSAGES} events in the database",
          timeout=30, interval=0.2)

    grace = pod["terminationGracePeriodSeconds"]
    assert grace > SHUTDOWN_TIMEOUT
    process.signal(signal.SIGTERM)
    assert process.wait(grace) == 0, process.log()[-4000:]

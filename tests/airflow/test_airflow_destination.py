"""The ``airflow`` destination against a whole Airflow 3.3.2: API server, scheduler and
DAG processor (``airflow_server.AirflowStack``), each asset with a DAG scheduled on it.

One triggerer (``sharedstream run``, a real process) ingests a topic into three assets
and delivers them: ``kafka_orders`` as fast as it can, ``paced_orders`` through a
destination with ``pace_seconds``, and ``ghost``, which Airflow does not know. Measured
facts of Airflow the tests rely on (apache/airflow#56050): events posted faster than the
scheduler loop share one run, and a run appears about 1 s after its event.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from airflow_server import (
    KAFKA_ORDERS,
    REFUSED_KAFKA_DAG,
    AirflowStack,
    drop_postgres_database,
    ensure_airflow_stack,
    fresh_postgres_database,
)
from streams import produce
from triggerer import Triggerer, run_cli, until, write_config

from sharedstream.statestore.models import delivery_cursor

WATCHERS = Path(__file__).resolve().parent / "destination_watchers.py"
PACED = ("paced_orders", "s3://stack/paced")
PACE = 2.0


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, database_url: str) -> Iterator[AirflowStack]:
    try:
        url = fresh_postgres_database(database_url)
        made = AirflowStack(tmp_path_factory.mktemp("airflow-stack"), [KAFKA_ORDERS, PACED],
                            database_url=url, dag_files={"refused_kafka.py": REFUSED_KAFKA_DAG},
                            airflow=ensure_airflow_stack())
        made.start()
    except Exception as error:
        pytest.fail(f"a real Airflow stack is needed by these tests: {error}", pytrace=False)
    try:
        yield made
    finally:
        made.stop()
        drop_postgres_database(url)


def identities(stack: AirflowStack, uri: str) -> Counter[str]:
    """How many Airflow events of the asset carry each sharedstream identity."""
    return Counter(e["extra"]["sharedstream_event"]["identity"] for e in stack.events(uri)
                   if "sharedstream_event" in (e.get("extra") or {}))


def config(tmp_path: Path, stack: AirflowStack, pg_url: str, connection: dict[str, Any],
           **airflow_options: Any) -> Path:
    common = {"kind": "airflow", "instance": "stack", "start": "earliest",
              "retry_initial": 0.2, "retry_max": 1.0, "lease_seconds": 2.0}
    # A burst of messages commits in one unit of work (uow_max_delay), so one delivery
    # round carries all of it.
    return write_config(tmp_path / "sharedstream.toml", database_url=pg_url,
                        connection=connection, triggerer={"uow_max_delay": 0.5}, tables={
                            "airflow.stack": {"base_url": stack.base_url, "username": "admin",
                                              "password": stack.password},
                            "destinations.airflow": {**common, "assets": ["kafka_orders", "ghost"],
                                                     **airflow_options},
                            "destinations.paced": {**common, "assets": ["paced_orders"],
                                                   "pace_seconds": PACE}})


def test_every_message_is_one_airflow_event_and_a_paced_destination_one_run_each(
        stack: AirflowStack, tmp_path: Path, pg_url: str, kafka_bootstrap: str,
        connection: dict[str, Any], create_topic: Callable[..., str],
        triggerers: Callable[..., Triggerer]) -> None:
    count = 5
    # Airflow refuses the uri Kafka users write; the destination finds the asset by name.
    [error] = [e for e in stack.import_errors() if e["filename"] == "refused_kafka.py"]
    assert "kafka:// must contain a topic name" in error["stack_trace"]
    topic = create_topic("dest")
    cfg = config(tmp_path, stack, pg_url, connection)
    process = triggerers(cfg, watchers=WATCHERS, env={"DEST_TOPIC": topic}).start()
    produce(kafka_bootstrap, topic, range(count), 1)
    name, uri = KAFKA_ORDERS
    until(lambda: sum(identities(stack, uri).values()) >= count, "the events in Airflow", 90)
    paced = stack.wait_for_runs(stack.dag_id(PACED[0]), count, timeout=90)
    # Exactly one Airflow event per message, each carrying its payload.
    assert set(identities(stack, uri).values()) == {1} and len(identities(stack, uri)) == count
    payloads = sorted(json.loads(e["extra"]["payload"])["id"] for e in stack.events(uri))
    assert payloads == list(range(count))
    # Paced: a run per event. Unpaced, the burst may share runs (never more runs than
    # events); the scheduler merges what arrives within one loop.
    assert [len(run.consumed_ids) for run in paced] == [1] * count
    fast = stack.dag_runs(stack.dag_id(name), consumed=False)
    assert 1 <= len(fast) <= count
    # The asset Airflow does not know: undeliverable, once per event, with the reason.
    until(lambda: len(undelivered(tmp_path, cfg)) == count, "ghost's events undelivered")
    assert {row["event"]["asset"] for row in undelivered(tmp_path, cfg)} == {"ghost"}
    assert all("unknown asset" in row["reason"] for row in undelivered(tmp_path, cfg))
    assert process.get("/readyz")[0] == 200  # refusals are not an outage


def stored_cursor(database_url: str, destination: str) -> int:
    engine = sa.create_engine(database_url)
    try:
        with engine.connect() as connection:
            return int(connection.execute(
                sa.select(delivery_cursor.c.last_id)
                .where(delivery_cursor.c.destination == destination)).scalar_one())
    finally:
        engine.dispose()


def undelivered(tmp_path: Path, cfg: Path) -> list[dict[str, Any]]:
    done = run_cli(["events", "undelivered", "--config", str(cfg), "--json"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows: list[dict[str, Any]] = json.loads(done.stdout)
    return rows


def test_sigkill_mid_delivery_and_an_api_outage_make_no_second_event(
        stack: AirflowStack, tmp_path: Path, pg_url: str, kafka_bootstrap: str,
        connection: dict[str, Any], create_topic: Callable[..., str],
        triggerers: Callable[..., Triggerer]) -> None:
    count = 5
    topic = create_topic("dest")
    # The paced destination posts one event every PACE seconds: a kill after the first
    # post lands between two posts of one delivery round, its cursor not yet stored.
    cfg = config(tmp_path, stack, pg_url, connection)
    env = {"DEST_TOPIC": topic}
    uri = PACED[1]
    kafka_uri = KAFKA_ORDERS[1]
    before = sum(identities(stack, uri).values())
    kafka_before = sum(identities(stack, kafka_uri).values())
    first = triggerers(cfg, watchers=WATCHERS, env=env).start()
    produce(kafka_bootstrap, topic, range(count), 1)
    until(lambda: sum(identities(stack, uri).values()) - before >= 1, "a first paced post", 60,
          interval=0.1)
    first.kill()  # SIGKILL between the posts of one round: the cursor is behind
    posted = [e["extra"]["sharedstream_event"]["id"] for e in stack.events(uri)
              if "sharedstream_event" in (e.get("extra") or {})][before:]
    assert 0 < len(posted) < count
    assert max(posted) > stored_cursor(pg_url, "paced")  # the fault landed mid-round
    second = triggerers(cfg, watchers=WATCHERS, env=env).start()
    until(lambda: sum(identities(stack, uri).values()) - before >= count,
          "every paced event after the restart", 90)
    assert set(identities(stack, uri).values()) == {1}  # checked first: no second event

    # The API server down: delivery holds, readiness names the destination, then
    # everything arrives once.
    until(lambda: sum(identities(stack, kafka_uri).values()) - kafka_before >= count,
          "the unpaced events of the first phase", 60)
    stack.api_server.stop()
    try:
        produce(kafka_bootstrap, topic, range(count, 2 * count), 1)
        until(lambda: "destination airflow" in second.get("/readyz")[1],
              "readiness naming the destination", 60)
    finally:
        stack.start()
    until(lambda: sum(identities(stack, kafka_uri).values()) - kafka_before >= 2 * count,
          "the held events after the outage", 90)
    assert set(identities(stack, kafka_uri).values()) == {1}
    until(lambda: second.get("/readyz")[0] == 200, "ready again", 60)

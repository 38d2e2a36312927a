"""The ``airflow`` destination against a whole Airflow 3.3.2: API server, scheduler and
DAG processor (``airflow_server.AirflowStack``), each asset with a DAG scheduled on it.

One triggerer (``sharedstream run``, a real process) ingests a topic into three assets
and delivers them: ``kafka_orders`` as fast as it can, ``paced_orders`` through a
destination with ``pace_seconds``, and ``ghost``, which Airflow does not know. Measured
facts of Airflow the tests rely on (apache/airflow#56050): events posted faster than the
scheduler loop share one run, and a run appears about 1 s after its event.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
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
from recording_proxy import LISTING, RecordingProxy
from streams import produce
from triggerer import Triggerer, run_cli, until, write_config

from sharedstream.statestore.models import delivery_cursor

WATCHERS = Path(__file__).resolve().parent / "destination_watchers.py"
PACED = ("paced_orders", "s3://stack/paced")
PACE = 2.0
PROBE = ("listing_probe", "s3://stack/probe")  # an asset no triggerer posts to


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, database_url: str) -> Iterator[AirflowStack]:
    try:
        url = fresh_postgres_database(database_url)
        made = AirflowStack(tmp_path_factory.mktemp("airflow-stack"), [KAFKA_ORDERS, PACED, PROBE],
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
    # Ready first: on a broker just started (this module runs first in the suite) the
    # group coordinator may still be loading, which is start-up, not delivery.
    process.wait_ready(120)
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


def proxied_config(tmp_path: Path, proxy: RecordingProxy, stack: AirflowStack, pg_url: str,
                   connection: dict[str, Any]) -> Path:
    """One unpaced destination of ``kafka_orders``, reaching Airflow through ``proxy``.

    The proxy holds a request on purpose (until the test has set up the fault), for as
    long as that takes on a loaded machine: a request timeout longer than any hold keeps
    a hold from reading as Airflow not answering."""
    return write_config(tmp_path / "sharedstream.toml", database_url=pg_url,
                        connection=connection, triggerer={"uow_max_delay": 0.5}, tables={
                            "airflow.stack": {"base_url": proxy.url, "username": "admin",
                                              "password": stack.password,
                                              "request_timeout": 120.0},
                            "destinations.airflow": {
                                "kind": "airflow", "instance": "stack", "start": "earliest",
                                "retry_initial": 0.2, "retry_max": 1.0, "lease_seconds": 2.0,
                                "assets": [KAFKA_ORDERS[0]]}})


def new_events(stack: AirflowStack, before: Counter[str]) -> dict[str, int]:
    """Identity -> Airflow events carrying it, of kafka_orders, not counted in ``before``."""
    return dict(identities(stack, KAFKA_ORDERS[1]) - before)


def test_the_first_round_of_a_new_destination_checks_nothing_before_posting(
        stack: AirflowStack, tmp_path: Path, pg_url: str, kafka_bootstrap: str,
        connection: dict[str, Any], create_topic: Callable[..., str],
        triggerers: Callable[..., Triggerer]) -> None:
    """Nothing can have been sent for a destination whose cursor row did not exist
    (issue 25.9): no listing of Airflow's events before its first posts."""
    count = 5
    topic = create_topic("dest")
    before = identities(stack, KAFKA_ORDERS[1])
    with RecordingProxy(stack.base_url) as proxy:
        cfg = proxied_config(tmp_path, proxy, stack, pg_url, connection)
        triggerers(cfg, watchers=WATCHERS, env={"DEST_TOPIC": topic}).start()
        produce(kafka_bootstrap, topic, range(count), 1)
        until(lambda: len(new_events(stack, before)) >= count, "the events in Airflow", 90)
        forwarded = proxy.forwarded()
    assert set(new_events(stack, before).values()) == {1}
    assert len([r for r in forwarded if r.method == "POST" and r.path == LISTING]) == count
    assert [r for r in forwarded if r.identity_lookup] == []


def test_a_restart_delivers_the_rest_through_listing_500s_without_failing_or_a_second_event(
        stack: AirflowStack, tmp_path: Path, pg_url: str, kafka_bootstrap: str,
        connection: dict[str, Any], create_topic: Callable[..., str],
        triggerers: Callable[..., Triggerer]) -> None:
    """kill -9 after 12 posts, the 13th in flight and taken by Airflow; the restarted
    process checks what was posted while Airflow answers that listing 500 (a run of the
    asset queued), as 3.3.2 does after each post (issue 25.9)."""
    count, killed_after = 50, 12
    topic = create_topic("dest")
    asset_id = stack.asset_id_by_name(KAFKA_ORDERS[0])
    before = identities(stack, KAFKA_ORDERS[1])
    posts = itertools.count(1)
    with RecordingProxy(stack.base_url) as proxy:
        cfg = proxied_config(tmp_path, proxy, stack, pg_url, connection)
        env = {"DEST_TOPIC": topic}
        proxy.hold(lambda method, path, _q: method == "POST" and path == LISTING
                   and next(posts) > killed_after)
        first = triggerers(cfg, watchers=WATCHERS, env=env).start()
        produce(kafka_bootstrap, topic, range(count), 1)
        until(proxy.holding.is_set, "the 13th post in flight", 90)
        first.kill()
        proxy.release()  # Airflow takes it; the killed sender never hears
        until(lambda: len(new_events(stack, before)) == killed_after + 1, "the held post", 30)
        # The fault landed: events in Airflow that the stored cursor does not cover.
        assert stored_cursor(pg_url, "airflow") < max(
            e["extra"]["sharedstream_event"]["id"] for e in stack.events(KAFKA_ORDERS[1])
            if "sharedstream_event" in (e.get("extra") or {}))
        proxy.hold(lambda method, path, query: method == "GET" and path == LISTING
                   and "asset_id" in query)
        second = triggerers(cfg, watchers=WATCHERS, env=env).start()
        until(proxy.holding.is_set, "the restarted process's check of what was posted", 90)
        # Its listing goes to Airflow until Airflow answers it 500, which it does for a
        # moment after a post (a run of the asset queued): the test posts until then.
        proxy.release(until_status=500)
        for n in range(20):
            stack.post_event(asset_id, {"posted_by": "the test", "n": n})
            if proxy.caught.wait(3):
                break
        assert proxy.caught.is_set(), "Airflow never answered the listing 500"
        until(lambda: len(new_events(stack, before)) >= count, "every event after the restart",
              120)
        forwarded = proxy.forwarded()
        metrics = second.get("/metrics")[1]
        ready = second.get("/readyz")
    # The restarted process met the 500 (the fault landed) ...
    assert any(r.identity_lookup and r.status == 500 for r in forwarded)
    # ... and never reported the destination failing: no transient failure counted.
    assert [line for line in metrics.splitlines() if line.startswith(
        'sharedstream_delivery_failures_total{destination="airflow"')] == [], metrics
    assert ready[0] == 200, ready
    # One Airflow event per message: the 13 posted before the kill were not posted again.
    assert len(new_events(stack, before)) == count
    assert set(new_events(stack, before).values()) == {1}


def test_the_listing_helper_asks_again_after_airflow_s_500_on_a_new_connection(
        stack: AirflowStack, monkeypatch: pytest.MonkeyPatch) -> None:
    """Airflow 3.3.2 answers the event listing 500 while a run an event created is queued
    (``AirflowStack.asset_events``). The 500 comes from an exception in the app, after
    which its server (uvicorn) closes the connection; the close comes after the error is
    logged, so a request sent on that kept-alive connection meanwhile is reset (seen in
    CI: ``ReadError: Connection reset by peer`` on a busy machine). The helper must ask
    again on a new connection. Here the run is held queued (scheduler stopped, the row as
    the scheduler leaves a queued run) and the helper's clock is the test's: no pause, so
    its next request follows the 500 at once, and no deadline, however slow the server;
    the run is "started" at the third pause."""
    import airflow_server

    name, uri = PROBE
    dag = stack.dag_id(name)
    asset_id = stack.asset_id(uri)
    event_id = stack.post_event(asset_id, {"probe": "listing-500"})["id"]
    # Waited for by the runs' listing: the events' one answers 500 until the run starts.
    stack.wait_until(lambda: [r.state for r in stack.dag_runs(dag, consumed=False)]
                     == ["success"], 120, "the probe's run")
    [run] = stack.dag_runs(dag, consumed=False)
    engine = sa.create_engine(stack.database_url.replace("+psycopg2", "+psycopg"))
    where = {"dag": dag, "run": run.run_id}
    stack.scheduler.stop()  # nothing starts the queued run but this test
    try:
        with engine.begin() as db:
            started = db.execute(sa.text(
                "SELECT start_date FROM dag_run WHERE dag_id = :dag AND run_id = :run"),
                where).scalar_one()
            db.execute(sa.text("UPDATE dag_run SET state = 'queued', start_date = NULL "
                               "WHERE dag_id = :dag AND run_id = :run"), where)
        pauses: list[float] = []

        def pause(seconds: float) -> None:
            pauses.append(seconds)
            assert len(pauses) <= 10, "the listing still answers 500 after its run started"
            if len(pauses) == 3:
                with engine.begin() as db:
                    db.execute(sa.text(
                        "UPDATE dag_run SET state = 'success', start_date = :started "
                        "WHERE dag_id = :dag AND run_id = :run"), {**where, "started": started})

        with monkeypatch.context() as patch:
            patch.setattr(airflow_server, "time", SimpleNamespace(sleep=pause,
                                                                  monotonic=lambda: 0.0))
            events = stack.asset_events(asset_id)
        assert len(pauses) == 3  # three 500s, each asked again, then the listing
        [probe] = [e for e in events if e["id"] == event_id]
        assert [r["run_id"] for r in probe["created_dagruns"]] == [run.run_id]
    finally:
        engine.dispose()
        stack.start()

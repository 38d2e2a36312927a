"""What a real Airflow 3.3.2 (API server + scheduler + DAG processor) does with the asset
events an "airflow" destination posts to ``POST /api/v2/assets/events``.

Measured on the stack of ``airflow_server.AirflowStack`` (PostgreSQL metadata database,
Kafka provider installed). The facts users must know, asserted without exact counts
where only Airflow's timing decides them:

* paced events (each posted once the previous one's run exists) get one run each;
* a burst (events faster than the scheduler loop, about 1 s) gets fewer runs than events,
  and the tail of the burst is consumed by no run and queued for none: it waits for the
  asset's next event, whose run then consumes it too (apache/airflow#56050);
* ``Asset(uri="kafka://orders")`` is refused when the DAG file is parsed (the Kafka
  provider wants ``kafka://<bootstrap>/<topic>``); an asset in that form takes REST events.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
from airflow_server import (
    KAFKA_ORDERS,
    REFUSED_KAFKA_DAG,
    AirflowStack,
    DagRunInfo,
    drop_postgres_database,
    ensure_airflow_stack,
    fresh_postgres_database,
)

BURST = ("burst", "s3://stack/burst")
PACED = ("paced", "s3://stack/paced")
OUTAGE = ("outage", "s3://stack/outage")
EVENTS = 5


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, database_url: str) -> Iterator[AirflowStack]:
    try:
        airflow = ensure_airflow_stack()
        url = fresh_postgres_database(database_url)
        began = time.monotonic()
        made = AirflowStack(tmp_path_factory.mktemp("airflow-stack"),
                            [BURST, PACED, OUTAGE, KAFKA_ORDERS], database_url=url,
                            dag_files={"refused_kafka.py": REFUSED_KAFKA_DAG}, airflow=airflow)
        migrated = time.monotonic() - began
        started = made.start()
        print(f"Airflow stack: db migrate {migrated:.1f}s, start {started:.1f}s")
    except Exception as error:
        pytest.fail(f"a real Airflow stack is needed by these tests: {error}", pytrace=False)
    try:
        yield made
    finally:
        made.stop()
        drop_postgres_database(url)


def settled_runs(stack: AirflowStack, dag_id: str, at_least: int) -> list[DagRunInfo]:
    """The DAG's runs once at least ``at_least`` exist and nothing is queued for it: no
    further run can appear until a new event arrives (the scheduler deletes a queue row
    in the transaction that creates its run)."""
    stack.wait_until(
        lambda: len(stack.dag_runs(dag_id, consumed=False)) >= at_least
        and not stack.queued_events(dag_id),
        60, f"{dag_id}: {at_least} runs and an empty queue")
    return stack.dag_runs(dag_id)


def test_paced_events_get_one_run_each(stack: AirflowStack) -> None:
    asset_id, dag_id = stack.asset_id_by_name(PACED[0]), stack.dag_id(PACED[0])
    posted: list[int] = []
    waited: list[float] = []
    for n in range(EVENTS):
        started = time.monotonic()
        posted.append(int(stack.post_event(asset_id, {"n": n})["id"]))
        runs = stack.wait_for_runs(dag_id, n + 1)
        waited.append(time.monotonic() - started)
    print(f"paced: {len(runs)} runs for {EVENTS} events, each run "
          f"{min(waited):.1f}-{max(waited):.1f}s after its event")
    assert [run.consumed_ids for run in runs] == [[event] for event in posted]
    # The event's own view agrees: each one names the run that consumed it.
    by_id = {int(e["id"]): e for e in stack.asset_events(asset_id)}
    for run, event in zip(runs, posted, strict=True):
        assert [r["run_id"] for r in by_id[event]["created_dagruns"]] == [run.run_id]
    # ``extra`` comes back as posted, plus the flag Airflow adds to REST-made events.
    assert by_id[posted[0]]["extra"] == {"n": 0, "from_rest_api": True}


def test_burst_gets_fewer_runs_and_its_tail_waits_for_the_next_event(
        stack: AirflowStack) -> None:
    asset_id, dag_id = stack.asset_id_by_name(BURST[0]), stack.dag_id(BURST[0])
    before = 0
    # The tail is stranded unless the scheduler's loop (about 1 s) happens to fall between
    # the last two posts (about 15 ms apart): a second burst makes that a non-event.
    for _attempt in range(3):
        with stack.api() as api:
            started = time.monotonic()
            burst = [int(stack.post_event(asset_id, {"n": n}, api)["id"])
                     for n in range(EVENTS)]
            took = time.monotonic() - started
        runs = settled_runs(stack, dag_id, before + 1)[before:]
        consumed = [event for run in runs for event in run.consumed_ids]
        print(f"burst of {EVENTS} events in {took:.3f}s: {len(runs)} run(s) consuming "
              f"{[run.consumed_ids for run in runs]}")
        assert len(runs) < EVENTS, "a burst should share runs"
        assert sorted(consumed) == sorted(set(consumed)), "an event consumed twice"
        assert set(consumed) <= set(burst)
        stranded = [event for event in burst if event not in consumed]
        before += len(runs)
        if stranded:
            break
    assert stranded, "no burst left events unconsumed"
    # The stranded events are the burst's tail, and nothing is queued to consume them.
    assert burst[-len(stranded):] == stranded
    assert stack.queued_events(dag_id) == []
    no_run = [e for e in stack.asset_events(asset_id) if int(e["id"]) in stranded]
    assert [e["created_dagruns"] for e in no_run] == [[]] * len(stranded)

    # The asset's next event brings them: its run consumes the tail and itself.
    closing = int(stack.post_event(asset_id, {"closing": True})["id"])
    last = stack.wait_for_runs(dag_id, before + 1)[-1]
    assert last.consumed_ids == [*stranded, closing]


def test_kafka_uri_needs_host_and_topic_and_the_accepted_form_takes_events(
        stack: AirflowStack) -> None:
    # Refused while the DAG file is parsed: an import error, and no DAG, no asset.
    errors = [e for e in stack.import_errors() if e["filename"] == "refused_kafka.py"]
    assert len(errors) == 1
    assert "ValueError: URI format kafka:// must contain a topic name" in errors[0]["stack_trace"]
    with stack.api() as api:
        assert api.get(f"/api/v2/dags/{stack.dag_id('refused_kafka')}").status_code == 404
    with pytest.raises(LookupError):
        stack.asset_id("kafka://orders")

    # kafka://<host:port>/<topic> is registered as written; no broker is ever contacted.
    name, uri = KAFKA_ORDERS
    asset_id = stack.asset_id(uri)
    assert asset_id == stack.asset_id_by_name(name)
    event = int(stack.post_event(asset_id, {"offset": 42})["id"])
    run = stack.wait_for_runs(stack.dag_id(name), 1)[-1]
    assert run.consumed_ids == [event]
    assert run.consumed[0]["uri"] == uri and run.consumed[0]["extra"]["offset"] == 42


def test_api_server_outage_keeps_the_database_and_the_scheduler(stack: AirflowStack) -> None:
    asset_id, dag_id = stack.asset_id_by_name(OUTAGE[0]), stack.dag_id(OUTAGE[0])
    first = int(stack.post_event(asset_id, {"phase": "before"})["id"])
    stack.wait_for_runs(dag_id, 1)
    stack.api_server.stop()
    try:
        assert stack.scheduler.running and stack.dag_processor.running
        with pytest.raises(httpx.ConnectError):
            stack.post_event(asset_id, {"phase": "outage"})
    finally:
        restart = stack.start()  # only the API server was down
    print(f"API server back in {restart:.1f}s")
    after = int(stack.post_event(asset_id, {"phase": "after"})["id"])
    runs = stack.wait_for_runs(dag_id, 2)
    assert [run.consumed_ids for run in runs] == [[first], [after]]


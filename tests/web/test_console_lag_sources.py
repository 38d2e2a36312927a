"""Where the console's lag comes from when the triggerers do not report it (issue 29).

A real broker and PostgreSQL: a three-partition topic with two messages in each
partition, and a consumer group that committed offset 0 everywhere (the committed lag
is 2 per partition), recorded in ``stream_group`` as a triggerer records it.

* No triggerer runs: the overview shows the group's committed lag (6 over 3
  partitions, not "-" over 0), and the group page's chart draws it, saying its source.
* One live triggerer reports partitions 0 and 1 only (what the survivor of a kill -9
  reports until the broker's session timeout hands it partition 2): the partition that
  nobody consumes is flagged at once.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic
from console_seed import StatusServer
from db_schemas import postgres_schema_url
from sqlalchemy import update
from starlette.testclient import TestClient

from kafka_writes import ordered_producer
from sharedstream.statestore.models import triggerer_process
from sharedstream.statestore.store import StateStore
from sharedstream.triggerer.heartbeat import Heartbeat
from sharedstream.triggerer.registration import GroupDeclaration, register_groups

pytestmark = pytest.mark.integration
PARTITIONS = 3


def _status(process_id: str, group: str, topic: str, owned: list[int]) -> dict[str, Any]:
    parts = [{"topic": topic, "partition": p, "base": 0, "floor": 2, "position": 2,
              "remembered": 0, "held": 0, "open_bytes": 0, "fetch": "open",
              "committed": 2, "end": 2, "lag": 0, "paused": False} for p in owned]
    return {"version": "0.1.0", "process": {"id": process_id}, "ready": True,
            "groups": [{"consumer_group": group, "cohort": ["w"], "present": ["w"],
                        "polling": True, "paused": False, "in_flight": 0, "queued": 0,
                        "received": 4, "redelivered": 0, "partitions": parts,
                        "held": []}]}


class Lagging:
    def __init__(self, store: StateStore, topic: str, group: str, bootstrap: str) -> None:
        self.store, self.topic, self.group, self.bootstrap = store, topic, group, bootstrap

    def client(self) -> TestClient:
        from sharedstream.web.app import create_app
        from sharedstream.web.settings import ConsoleSettings

        settings = ConsoleSettings(connections={"kafka_default": {"bootstrap.servers":
                                                              self.bootstrap}},
                               trusted_hosts=("testserver",), kafka_timeout=10.0)
        return TestClient(create_app(settings, self.store, sampler=False))


@pytest.fixture(scope="module")
def lagging(database_url: str, kafka_bootstrap: str, kafka_admin: AdminClient
            ) -> Iterator[Lagging]:
    suffix = uuid.uuid4().hex[:8]
    topic, group = f"web-lag-{suffix}", f"sharedstream.web-lag-{suffix}"
    kafka_admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS,
                                        replication_factor=1)])[topic].result(30)
    producer = ordered_producer(kafka_bootstrap)
    for n in range(2 * PARTITIONS):
        producer.produce(topic, value=b"{}", partition=n % PARTITIONS)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group})
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, 0) for p in range(PARTITIONS)],
                        asynchronous=False)
    finally:
        consumer.close()
    schema = postgres_schema_url(database_url)
    with StateStore.from_url(next(schema)) as store:
        store.upgrade()
        register_groups(store, [GroupDeclaration(("kafka", (topic,), "kafka_default"),
                                                 group, frozenset({"w"}))], takeover=True)
        try:
            yield Lagging(store, topic, group, kafka_bootstrap)
        finally:
            kafka_admin.delete_topics([topic], operation_timeout=10)
            schema.close()


def _group(overview: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(g for g in overview["groups"] if g["consumer_group"] == name)
    return found


def test_without_a_triggerer_the_overview_and_the_chart_show_the_committed_lag(
        lagging: Lagging) -> None:
    with lagging.client() as client:
        group = _group(client.get("/api/v1/overview").json(), lagging.group)
        assert (group["health"], group["lag"], group["partition_count"]) == (
            "no_triggerer", 2 * PARTITIONS, PARTITIONS)
        assert group["lag_source"] == "kafka"
        page = client.get(f"/groups/{lagging.group}").text
        lines = dict(re.findall(r'data-partition="([^"]+)" data-last="(\d+)"', page))
        assert lines == {f"{lagging.topic}[{p}]": "2" for p in range(PARTITIONS)}
        assert "the broker's committed offsets" in page
        overview = client.get("/").text
        row = re.search(rf'<tr class="group" data-group="{re.escape(lagging.group)}"[^>]*>',
                        overview)
        assert row is not None and f'data-lag="{2 * PARTITIONS}"' in row.group(0)


def test_a_partition_no_live_triggerer_consumes_is_flagged_at_once(lagging: Lagging) -> None:
    beat = Heartbeat(lagging.store, version="0.1.0", watchers=["dags/w.py"],
                     groups=[lagging.group], status_url="http://127.0.0.1:9/status")
    beat.register()
    server = StatusServer(_status(beat.id, lagging.group, lagging.topic, [0, 1]))
    try:
        with lagging.store.engine.begin() as connection:
            connection.execute(update(triggerer_process)
                               .where(triggerer_process.c.id == beat.id)
                               .values(status_url=server.url))
        with lagging.client() as client:
            group = _group(client.get("/api/v1/overview").json(), lagging.group)
            assert group["unowned"] == [f"{lagging.topic}[2]"]
            assert group["health"] == "unowned"
            # Partitions 0 and 1 from the triggerer (0), partition 2 from the broker (2).
            assert (group["lag"], group["lag_source"]) == (2, "mixed")
            page = client.get(f"/groups/{lagging.group}").text
            assert re.search(rf'<tr class="partition unowned" data-partition='
                             rf'"{re.escape(lagging.topic)}\[2\]"', page)
    finally:
        server.stop()
        beat.unregister()

"""The console's rejection counts equal what the dead-letter topic and the database hold
(issue 41, section 4), after a real triggerer rejected real messages.

Two watchers share a dead-letter topic of three partitions and reject every message of
their topic with one reason; two others have none, so their rejections are rows. The
console reads at most ``dlq_max_records`` records of a topic for its page (10 here, of
30): its counts still cover the whole topic, count a copy of a dead letter once, count
a dead letter once per reason however many watchers gave it, and follow the topic when
retention removes records from it.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from db_schemas import postgres_schema_url
from starlette.testclient import TestClient
from test_dlq_commands import committed_sum, read_all, until

from kafka_writes import ordered_producer
from sharedstream import (
    Asset,
    AssetWatcher,
    KafkaMessage,
    KafkaSharedStreamTrigger,
    TriggerEvent,
    reject_shared_stream_event,
)
from sharedstream.statestore.store import StateStore
from sharedstream.triggerer import Config, DatabaseSettings, ProcessSettings, Triggerer
from sharedstream.web.app import create_app
from sharedstream.web.settings import ConsoleSettings

pytestmark = pytest.mark.integration
GROUP_ID = "counts"


class RejectAll(KafkaSharedStreamTrigger):
    async def filter_shared_stream(self, stream: AsyncIterator[KafkaMessage]
                                   ) -> AsyncIterator[TriggerEvent]:
        async for _message in stream:
            reject_shared_stream_event("nope" if self.dlq_topic else "bad")
        return
        yield  # an async generator that yields nothing


class RejectAllToo(RejectAll):
    """A second class: each watcher its own trigger object."""


@pytest.fixture
def pg_url(database_url: str) -> Iterator[str]:
    yield from postgres_schema_url(database_url)


def produce(bootstrap: str, topic: str, count: int, partitions: int) -> None:
    producer = ordered_producer(bootstrap)
    for n in range(count):
        producer.produce(topic, json.dumps({"id": n}).encode(), partition=n % partitions)
    assert producer.flush(30) == 0


def by_name(items: list[dict[str, Any]]) -> dict[str, int]:
    return {i["name"]: i["count"] for i in items}


async def test_rejected_and_by_reason_counts_equal_the_topic_and_the_database(
        kafka_bootstrap: str, create_topic: Callable[..., str], kafka_admin: AdminClient,
        pg_url: str) -> None:
    topic, dlq = create_topic("orders", partitions=3), create_topic("orders-dlq", partitions=3)
    quiet = create_topic("quiet")
    assets = [Asset("a", watchers=[
        AssetWatcher("rej", RejectAll(topics=[topic], dlq_topic=dlq)),
        AssetWatcher("rej2", RejectAllToo(topics=[topic], dlq_topic=dlq)),
        AssetWatcher("row", RejectAll(topics=[quiet])),
        AssetWatcher("row2", RejectAllToo(topics=[quiet]))])]
    produce(kafka_bootstrap, topic, 30, 3)
    produce(kafka_bootstrap, quiet, 7, 1)
    config = Config(database=DatabaseSettings(url=pg_url),
                    process=ProcessSettings(health_port=-1),
                    connections={"kafka_default": {"bootstrap.servers": kafka_bootstrap,
                                                   "group.id": GROUP_ID}})
    async with Triggerer(config, assets=assets, upgrade=True) as triggerer:
        await until(lambda: committed_sum(kafka_bootstrap, f"{GROUP_ID}.{topic}", topic, 3)
                    == 30 and committed_sum(kafka_bootstrap, f"{GROUP_ID}.{quiet}", quiet) == 7,
                    "every message committed past")
        triggerer.stop()
        assert await triggerer.wait() == 0
    # A copy of one dead letter (a crash between its delivery and the commit writes one).
    # Dead letters have no key: which partitions they went to is the producer's choice.
    letters = read_all(kafka_bootstrap, dlq, 3)
    fullest = Counter(r.partition() for r in letters).most_common(1)[0][0]
    first = next(r for r in letters if (r.partition(), r.offset()) == (fullest, 0))
    producer = ordered_producer(kafka_bootstrap)
    producer.produce(dlq, first.value(), first.key(), partition=fullest,
                     headers=first.headers())
    assert producer.flush(30) == 0

    store = StateStore.from_url(pg_url)
    try:
        settings = ConsoleSettings(connections={"kafka_default": {"bootstrap.servers":
                                                              kafka_bootstrap}},
                               dlq_topics=(dlq,), dlq_max_records=10,
                               trusted_hosts=("testserver",), kafka_timeout=10.0)
        client = TestClient(create_app(settings, store, sampler=False))
        watchers = {w["name"]: w["rejected"]
                    for w in client.get("/api/v1/watchers").json()["items"]}
        assert watchers == {"rej": 30, "rej2": 30, "row": 7, "row2": 7}
        page = client.get("/watchers").text
        assert page.count('<td class="num rejected"><a href=') == 4

        stats = client.get("/api/v1/dead-letters", params={"topic": dlq}).json()["stats"]
        assert stats["reasons"] == {"nope": 30}  # 30 dead letters, not 60 rejections
        assert stats["watchers"] == {"rej": 30, "rej2": 30}
        assert (stats["records"], stats["distinct"]) == (31, 30)
        assert sorted((p["watcher"], p["count"]) for p in stats["by_watcher_reason"]) == [
            ("rej", 30), ("rej2", 30)]
        recorded = client.get("/api/v1/rejected/stats").json()
        assert recorded["total"] == 14
        assert by_name(recorded["by_watcher"]) == {"row": 7, "row2": 7}
        # 7 messages, not 14 rows.
        assert by_name(recorded["by_reason"]) == {
            "bad (not dead-lettered: no dead-letter topic configured)": 7}

        # Retention removes the first 4 records of the fullest partition (at least 10 of
        # the 30; the copy, at its end, stays): the counts follow what the topic holds.
        kept = {dict(r.headers())["sharedstream.identity"]
                for r in read_all(kafka_bootstrap, dlq, 3)
                if r.partition() != fullest or r.offset() >= 4}
        assert len(kept) < 30
        kafka_admin.delete_records([TopicPartition(dlq, fullest, 4)])[
            TopicPartition(dlq, fullest, 4)].result(30)
        await until(lambda: client.get("/api/v1/watchers").json()["items"][0]["rejected"]
                    < 30, "the watchers page follows the topic", within=30)
        left = {w["name"]: w["rejected"]
                for w in client.get("/api/v1/watchers").json()["items"]}
        assert left == {"rej": len(kept), "rej2": len(kept), "row": 7, "row2": 7}
    finally:
        store.close()

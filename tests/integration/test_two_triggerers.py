"""Two embedded triggerers in one process, each with its own settings (issue 41, 3.9).

The first reads Avro values through a schema registry only its config names, on a
connection only its config names; the second has neither. Each keeps its own: the
second starting does not take the first's registry away (the first then held every
message, "not configured", for ever), and each one's readiness speaks of its own
registries. (That each keeps its Kafka connections and rejection recorder too is
tests/unit/kafka/test_runtime_scope.py.)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from db_schemas import postgres_schema_url
from readme_example import produce_avro_orders
from test_dlq_commands import committed_sum, until

from kafka_writes import ordered_producer
from sharedstream import Asset, AssetWatcher, KafkaSharedStreamTrigger
from sharedstream.serde import AvroValue
from sharedstream.statestore.models import asset_event
from sharedstream.triggerer import Config, DatabaseSettings, ProcessSettings, Triggerer

pytestmark = pytest.mark.integration


@pytest.fixture
def two_urls(database_url: str) -> Iterator[tuple[str, str]]:
    for first in postgres_schema_url(database_url):
        for second in postgres_schema_url(database_url):
            yield first, second


def payloads(url: str) -> list[Any]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(sa.select(asset_event.c.payload)
                                      .order_by(asset_event.c.offset)).scalars().all()
    finally:
        engine.dispose()
    return [json.loads(p) for p in rows]


def config(url: str, connection_id: str, bootstrap: str, **more: Any) -> Config:
    return Config(database=DatabaseSettings(url=url), process=ProcessSettings(health_port=-1),
                  connections={connection_id: {"bootstrap.servers": bootstrap,
                                               "group.id": connection_id}}, **more)


async def test_two_embedded_triggerers_keep_their_own_registries_and_connections(
        kafka_bootstrap: str, create_topic: Callable[..., str],
        schema_registry: str, two_urls: tuple[str, str]) -> None:
    avro_topic, text_topic = create_topic("two-avro"), create_topic("two-text")
    first_url, second_url = two_urls
    avro = KafkaSharedStreamTrigger(topics=[avro_topic], kafka_config_id="kafka_first",
                                    value_deserializer=AvroValue(registry="registry_first"))
    text = KafkaSharedStreamTrigger(topics=[text_topic], kafka_config_id="kafka_second")
    first = Triggerer(config(first_url, "kafka_first", kafka_bootstrap,
                             schema_registries={"registry_first": {"url": schema_registry}}),
                      assets=[Asset("avro", watchers=[AssetWatcher("avro", avro)])],
                      upgrade=True)
    second = Triggerer(config(second_url, "kafka_second", kafka_bootstrap),
                       assets=[Asset("text", watchers=[AssetWatcher("text", text)])],
                       upgrade=True)
    async with first:
        async with second:
            produce_avro_orders(kafka_bootstrap, schema_registry, avro_topic,
                                [{"id": 1, "status": "paid", "amount": 2.5}])
            producer = ordered_producer(kafka_bootstrap)
            producer.produce(text_topic, b"hello")
            assert producer.flush(30) == 0
            await until(lambda: committed_sum(kafka_bootstrap, f"kafka_first.{avro_topic}",
                                              avro_topic) == 1,
                        "the first triggerer's Avro value decoded and committed", within=30)
            await until(lambda: committed_sum(kafka_bootstrap, f"kafka_second.{text_topic}",
                                              text_topic) == 1,
                        "the second triggerer's text value committed", within=30)
            for running in (first, second):
                assert running._runtime is not None
                assert not [r for r in running._runtime.readiness()
                            if "schema registr" in r], running._runtime.readiness()
            second.stop()
            assert await second.wait() == 0
        first.stop()
        assert await first.wait() == 0
    assert payloads(first_url) == [{"id": 1, "status": "paid", "amount": 2.5}]
    assert payloads(second_url) == ["hello"]


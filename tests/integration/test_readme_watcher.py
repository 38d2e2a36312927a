"""The README's watcher example, run as written on a real registry, broker and PostgreSQL.

The README's Python block (``PaidOrders``, the batch filter ``LargeOrders``, the
``orders`` asset with its three watchers on one ``AvroValue``) is loaded from the README
itself, its topics renamed to this test's, and run by the embedded triggerer with the
README's ``[schema_registries.<id>]`` pointed at the test registry (Apicurio). Avro
orders written by confluent-kafka's serialiser become events; an order without an
amount, a value that is not framed and one whose schema id the registry does not know
are rejected to the dead-letter topic with their reasons. A README edit that breaks the
example fails here.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from db_schemas import postgres_schema_url
from readme_example import load_module, produce_avro_orders, registry_id, watcher_source
from test_dlq_commands import committed_sum, read_all, until

from sharedstream.kafka import dlq_headers as h
from sharedstream.statestore.models import asset_event
from sharedstream.triggerer import Config, DatabaseSettings, ProcessSettings, Triggerer

pytestmark = pytest.mark.integration
UNKNOWN_ID = 987655


@pytest.fixture
def pg_url(database_url: str) -> Iterator[str]:
    yield from postgres_schema_url(database_url)


def events(url: str) -> dict[str, list[dict[str, Any]]]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.select(asset_event.c.watcher, asset_event.c.payload)
                                .order_by(asset_event.c.offset)).all()
    finally:
        engine.dispose()
    found: dict[str, list[dict[str, Any]]] = {}
    for watcher, payload in rows:
        found.setdefault(watcher, []).append(json.loads(payload))
    return found


async def test_the_readme_watcher_reads_registry_avro_orders(
        tmp_path: Path, kafka_bootstrap: str, create_topic: Any, pg_url: str,
        schema_registry: str) -> None:
    topic, dlq = create_topic("readme-orders"), create_topic("readme-orders-dlq")
    source = watcher_source()
    for written, ours in (('topics=["orders"]', f"topics=[{topic!r}]"),
                          ('dlq_topic="orders.dlq"', f"dlq_topic={dlq!r}")):
        assert source.count(written) == 3, f"the README's watchers no longer use {written}"
        source = source.replace(written, ours)
    readme = load_module(source, tmp_path / "readme_watchers.py")
    produce_avro_orders(kafka_bootstrap, schema_registry, topic, [
        {"id": 1, "status": "paid", "amount": 10.5},
        {"id": 2, "status": "new", "amount": 3.0},     # not paid: no PaidOrders event
        {"id": 3, "status": "paid"},                   # no amount: PaidOrders rejects it
        {"id": 4, "status": "paid", "amount": 7.25},
    ], b'{"id": 5}', b"\x00" + struct.pack(">I", UNKNOWN_ID) + b"\x02")
    config = Config(database=DatabaseSettings(url=pg_url),
                    process=ProcessSettings(health_port=-1),
                    connections={"kafka_default": {"bootstrap.servers": kafka_bootstrap,
                                                   "group.id": "readme"}},
                    schema_registries={registry_id(): {"url": schema_registry}})
    async with Triggerer(config, assets=[readme.orders]) as triggerer:
        # Order 5's schema id is unknown: held for the registry's grace (30 s) and
        # dead-lettered when it ends, the hold saying when (retry_after): about 31 s
        # here, 47-57 s before, at the first backoff step past the grace. The default
        # 60 s wait leaves the grace's length again for a loaded machine's start.
        await until(lambda: committed_sum(kafka_bootstrap, f"readme.{topic}", topic) == 6,
                    "the six orders committed")
        triggerer.stop()
        assert await triggerer.wait() == 0

    found = events(pg_url)
    assert found["paid_orders"] == [{"id": 1, "amount": 10.5}, {"id": 4, "amount": 7.25}]
    assert [e["id"] for e in found["orders_audit"]] == [1, 2, 3, 4]
    assert found["orders_audit"][2] == {"id": 3, "status": "paid", "amount": None}
    assert found["large_orders"] == [{"id": 1, "amount": 10.5}]   # the batch filter
    dead = {json.loads(dict(m.headers())[h.ORIGINAL_OFFSET]):
            json.loads(dict(m.headers())[h.REJECTIONS]) for m in read_all(kafka_bootstrap, dlq)}
    assert dead[2] == {"paid_orders": "missing amount"}
    assert set(dead[4]) == set(dead[5]) == {"paid_orders", "orders_audit", "large_orders"}
    assert "expected 0x00 (magic byte)" in dead[4]["paid_orders"]
    assert f"schema id {UNKNOWN_ID}" in dead[5]["orders_audit"]
    assert f"schema id {UNKNOWN_ID}" in dead[5]["large_orders"]
    assert sorted(dead) == [2, 4, 5]

"""The manual's page per value format, its example run as written (issue 30).

Each of docs/values-json.md, values-avro.md, values-json-schema.md and
values-protobuf.md holds one watcher module (its Python block) and the rejection
reasons it documents (its ``text`` block). The four modules run together in one
embedded triggerer on the real broker and the test registry (the pages'
``[schema_registries.orders_sr]``), each on a topic of its own: a value written by
confluent-kafka's serialiser becomes the documented event, and the values the page
describes as failing are rejected with exactly the page's reasons (the schema ids
written as the page's 42). The Protobuf page's ``order_pb2`` is the tests' descriptor-
built ``Order``, the class ``protoc`` would generate from the page's ``.proto``.
"""

from __future__ import annotations

import json
import re
import struct
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import sqlalchemy as sa
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from readme_example import load_module
from registry_schemas import JSON_SCHEMA_V1, OrderV1
from test_dlq_commands import committed_sum, until
from test_text_safety import NO_DLQ, produce_values

from sharedstream.statestore.models import asset_event, rejected_message
from sharedstream.triggerer import Config, DatabaseSettings, ProcessSettings, Triggerer

pytestmark = pytest.mark.integration
DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGES = {"json": "values-json.md", "avro": "values-avro.md",
         "json_schema": "values-json-schema.md", "protobuf": "values-protobuf.md"}
UNKNOWN_ID = 987653
NOT_FRAMED = b'{"id": 1}'


def block(page: str, language: str) -> str:
    [found] = re.findall(rf"```{language}\n(.*?)```", (DOCS / page).read_text(), re.S)
    return str(found)


def framed(schema_id: int, body: bytes) -> bytes:
    return b"\x00" + struct.pack(">I", schema_id) + body


def as_documented(reason: str) -> str:
    """A reason as the pages write it: schema ids 42, no object address, and the message
    type without the package the tests' class has (the page's ``.proto`` has none)."""
    reason = re.sub(r"(schema id |id '|contentId-)\d+", r"\g<1>42", reason.removesuffix(NO_DLQ))
    reason = re.sub(r" at 0x[0-9a-f]+>", " at 0x7f...>", reason)
    return reason.replace("'sharedstream.test.Order'", "'Order'")


def values(fmt: str, page: ModuleType, registry: SchemaRegistryClient, topic: str
           ) -> list[bytes]:
    """One good value, then the failing values in the order the page lists them; the
    Avro and JSON Schema writers register their schema (BACKWARD) first."""
    context = SerializationContext(topic, MessageField.VALUE)
    good = {"id": 1, "amount": 2.5}
    if fmt == "json":
        return [json.dumps(good).encode(), b"nope", b'{"id": 2}', b'{"id": 3, "amount": "x"}']
    if fmt == "avro":
        schema = Schema(page.ORDER_V1, "AVRO")
        value = AvroSerializer(registry, page.ORDER_V1)(good, context)
        broken = b"\x02"  # an int, then no double
    elif fmt == "json_schema":
        schema = Schema(JSON_SCHEMA_V1, "JSON")
        value = JSONSerializer(JSON_SCHEMA_V1, registry)(good, context)
        broken = b'{"amount": 1}'
    else:
        value = ProtobufSerializer(OrderV1, registry, {"use.deprecated.format": False})(
            OrderV1(**good), context)
        broken = b"\x00\x0a\xff"  # message index 0, then a truncated field
    if fmt != "protobuf":  # Apicurio cannot check Protobuf compatibility (see the page)
        registry.register_schema(f"{topic}-value", schema)
        registry.set_compatibility(f"{topic}-value", "BACKWARD")
    schema_id = struct.unpack_from(">I", value, 1)[0]
    return [value, NOT_FRAMED, framed(UNKNOWN_ID, value[5:]), framed(schema_id, broken)]


def rows(url: str, table: Any, *columns: str) -> list[tuple[Any, ...]]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(
                sa.select(*(table.c[c] for c in columns)).order_by(table.c.offset)).all()]
    finally:
        engine.dispose()


async def test_each_format_page_runs_as_written_with_its_documented_rejections(
        tmp_path: Path, kafka_bootstrap: str, create_topic: Any, schema_registry: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    generated = ModuleType("order_pb2")
    generated.Order = OrderV1  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "order_pb2", generated)
    client = SchemaRegistryClient({"url": schema_registry})
    assets, topics, reasons = [], {}, {}
    for fmt, page in PAGES.items():
        topic = topics[fmt] = create_topic(f"values-{fmt}")
        source = block(page, "python")
        assert source.count('topics=["orders"]') == 1 and source.count('Asset("orders"') == 1
        source = source.replace('topics=["orders"]', f"topics=[{topic!r}]").replace(
            'Asset("orders"', f'Asset("orders_{fmt}"')
        module = load_module(source, tmp_path / f"values_{fmt}.py")
        assets.append(module.orders)
        reasons[fmt] = [as_documented(r) for r in block(page, "text").splitlines()]
        if fmt != "json":
            assert block(page, "toml").startswith("[schema_registries.orders_sr]\n")
        produce_values(kafka_bootstrap, topic, values(fmt, module, client, topic))
    url = f"sqlite:///{tmp_path / 'values.db'}"
    config = Config(database=DatabaseSettings(url=url), process=ProcessSettings(health_port=-1),
                    connections={"kafka_default": {"bootstrap.servers": kafka_bootstrap,
                                                   "group.id": "values"}},
                    # The unknown id is rejected a second after its first 404, not 30 s.
                    schema_registries={"orders_sr": {"url": schema_registry,
                                                     "missing.schema.grace.sec": 1}})
    async with Triggerer(config, assets=assets) as triggerer:
        for topic in topics.values():
            await until(lambda t=topic: committed_sum(kafka_bootstrap, f"values.{t}", t) == 4,
                        f"{topic} committed")
        triggerer.stop()
        assert await triggerer.wait() == 0

    watcher = {t: fmt for fmt, t in topics.items()}
    events = [(watcher[t], json.loads(p))
              for t, p in rows(url, asset_event, "topic", "payload")]
    events.sort(key=lambda e: e[0])
    assert events == [(fmt, {"id": 1, "amount": 2.5}) for fmt in sorted(PAGES)]
    found: dict[str, list[str]] = {}
    for t, reason in rows(url, rejected_message, "topic", "reason"):
        found.setdefault(watcher[t], []).append(as_documented(reason))
    assert found == reasons

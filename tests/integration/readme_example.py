"""The README's "A watcher" example as the tests run it: its code, its registry, its values.

The README shows a watcher of Confluent-framed Avro orders; these helpers take its
Python block and its ``[schema_registries.<id>]`` block from the README itself, so a
test that runs them fails when the README's example stops working.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from kafka_writes import ordered_producer

README = Path(__file__).resolve().parents[2] / "README.md"

# What a producer of the README's orders registers: ``amount`` may be missing (null).
ORDER_SCHEMA = json.dumps({"type": "record", "name": "Order", "namespace": "shop",
                           "fields": [{"name": "id", "type": "long"},
                                      {"name": "status", "type": "string"},
                                      {"name": "amount", "type": ["null", "double"],
                                       "default": None}]})


def _section() -> str:
    text = README.read_text(encoding="utf-8")
    return text[text.index("## A watcher"):text.index("## Where the events go")]


def watcher_source() -> str:
    """The Python block under "## A watcher", as written."""
    match = re.search(r"```python\n(.*?)```", _section(), re.S)
    assert match is not None, "no python block under '## A watcher'"
    return match.group(1)


def registry_id() -> str:
    """The id of the README's ``[schema_registries.<id>]`` block (its url is an example)."""
    match = re.search(r"```toml\n\[schema_registries\.(\w+)\]", _section())
    assert match is not None, "no [schema_registries.<id>] block under '## A watcher'"
    return match.group(1)


def load_module(source: str, path: Path) -> ModuleType:
    """``source`` as an importable module at ``path`` (the triggerer checks that every
    trigger's class can be imported again by its classpath)."""
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def produce_avro_orders(bootstrap: str, registry_url: str, topic: str,
                        orders: Iterable[Mapping[str, Any]], *raw: bytes) -> None:
    """``orders`` as confluent-kafka's Avro serialiser frames them (the schema registered
    under ``<topic>-value``), then ``raw`` values as they are, all to partition 0."""
    serialise = AvroSerializer(SchemaRegistryClient({"url": registry_url}), ORDER_SCHEMA)
    context = SerializationContext(topic, MessageField.VALUE)
    p = ordered_producer(bootstrap)
    for order in orders:
        p.produce(topic, serialise({"amount": None, **order}, context), partition=0)
    for value in raw:
        p.produce(topic, value, partition=0)
    assert p.flush(30) == 0

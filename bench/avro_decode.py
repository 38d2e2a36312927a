"""Avro decoded once: watchers sharing one Avro deserialiser against independent consumers.

Part of ``python -m bench`` (``python -m bench --avro`` runs only this; alone:
``python -m bench.avro_decode [--messages N]``). On the real broker and a real schema
registry (``SHAREDSTREAM_TEST_SCHEMA_REGISTRY_URL``, else the local Apicurio of
``scripts/localservices/registry.py``), a topic holds ``bench/decode_once.py``'s orders
written by confluent-kafka's ``AvroSerializer`` (Confluent-framed, ~40 bytes each), 1% of
them ``"status": "paid"``. In the same run, for 1, 10 and 100:

* ``shared_avro``: that many watchers on one shared consumer, each declaring the same
  ``AvroValue(registry=...)`` and keeping the paid orders: one decode per message for
  all of them (``kafka_throughput.shared``'s timing, first delivery to the last);
* ``independent_avro``: that many independent confluent-kafka consumers (threads, each
  its own group, registry client and ``AvroDeserializer``, as separate services would
  be), each decoding every message and keeping the paid ones, committing each batch.

Deliveries/s count messages x watchers (or consumers). The ratio is shared over
independent at the same count.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from bench import kafka_throughput as kt
from bench.decode_once import value
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from sharedstream.core.message import KafkaMessage
from sharedstream.serde import AvroValue, configure_schema_registries
from sharedstream.triggerer.gctune import tune_gc
from sharedstream.triggers.base import TriggerEvent

REGISTRY = "bench_registry"
ORDER = json.dumps({"type": "record", "name": "Order", "namespace": "bench", "fields": [
    {"name": "id", "type": "int"}, {"name": "status", "type": "string"},
    {"name": "amount", "type": "double"}, {"name": "customer", "type": "string"},
    {"name": "items", "type": {"type": "array", "items": "int"}}]})
COUNTS = (1, 10, 100)


class AvroKeep(kt.BenchTrigger):
    """Keeps the paid orders, read through the group's one ``AvroValue`` decode."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(value_deserializer=AvroValue(registry=REGISTRY), **kwargs)

    async def filter_shared_stream(
        self, stream: AsyncIterator[KafkaMessage]
    ) -> AsyncIterator[TriggerEvent]:
        async for message, order in self.decoded(stream):
            if order["status"] == "paid":
                yield TriggerEvent(message.offset)


class IndependentAvro:
    """An independent consumer's work per batch: decode each value with its own
    deserialiser (one per thread: one per consumer), keep the paid orders."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._local = threading.local()

    def __call__(self, batch: list[Any]) -> object:
        decode = getattr(self._local, "decode", None)
        if decode is None:
            decode = self._local.decode = AvroDeserializer(SchemaRegistryClient({"url": self.url}))
        return [TriggerEvent(m.offset()) for m in batch
                if decode(m.value(), SerializationContext(m.topic(), MessageField.VALUE)
                          )["status"] == "paid"]


@contextlib.contextmanager
def registry_url() -> Iterator[str]:
    """A real registry's Confluent API for the run: the environment's or a local one."""
    external = os.environ.get("SHAREDSTREAM_TEST_SCHEMA_REGISTRY_URL")
    if external:
        yield external
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    from localservices.registry import SchemaRegistry
    registry = SchemaRegistry()
    registry.start()
    try:
        yield registry.url
    finally:
        registry.stop()


def fill(bootstrap: str, url: str, messages: int) -> str:
    """A fresh topic of ``messages`` Avro orders (the schema registered under the subject
    ``bench-avro-value``: ``kafka_throughput.fill`` names the topic itself)."""
    serialise = AvroSerializer(SchemaRegistryClient({"url": url}), ORDER)
    context = SerializationContext("bench-avro", MessageField.VALUE)

    def framed(i: int) -> bytes:
        data: bytes = serialise(json.loads(value(i)), context)
        return data

    return kt.fill(bootstrap, messages, framed)


def measure(bootstrap: str, messages: int, runs: int = 3) -> dict[str, Any]:
    """Deliveries/s of shared and independent Avro decoding at each count (medians)."""
    rows = []
    with registry_url() as url:
        configure_schema_registries({REGISTRY: {"url": url}})
        topic = fill(bootstrap, url, messages)
        for n in COUNTS:
            rates: dict[str, list[float]] = {"shared_avro": [], "independent_avro": []}
            for _ in range(runs):  # alternating, so load drift hits both sides alike
                rates["shared_avro"].append(asyncio.run(
                    kt.shared(bootstrap, topic, messages, n, trigger=AvroKeep)))
                rates["independent_avro"].append(kt.independent(
                    bootstrap, topic, messages, n, work=IndependentAvro(url)))
            for kind, found in rates.items():
                rate = statistics.median(found)
                rows.append({"kind": kind, "watchers": n, "messages": messages,
                             "deliveries_per_s": round(rate),
                             "us_per_delivery": round(1e6 / rate, 3)})
            print(f"avro x{n}: { {k: round(statistics.median(v)) for k, v in rates.items()} }",
                  file=sys.stderr, flush=True)
        configure_schema_registries({})
    ratios = {}
    for n in COUNTS:
        by_kind = {r["kind"]: r["deliveries_per_s"] for r in rows if r["watchers"] == n}
        ratios[str(n)] = round(by_kind["shared_avro"] / by_kind["independent_avro"], 2)
    return {"rows": rows, "shared_over_independent": ratios, "runs": runs}


def markdown(found: dict[str, Any]) -> str:
    lines = ["### Avro: shared deserialiser vs independent consumers (issue 30)", "",
             "| watchers / consumers | shared_avro deliveries/s | independent_avro "
             "deliveries/s | shared / independent |", "|---|---|---|---|"]
    for n in COUNTS:
        by_kind = {r["kind"]: r["deliveries_per_s"] for r in found["rows"]
                   if r["watchers"] == n}
        lines.append(f"| {n} | {by_kind['shared_avro']:,} | {by_kind['independent_avro']:,} "
                     f"| x{found['shared_over_independent'][str(n)]} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--bootstrap", required=True)
    args = parser.parse_args()
    tune_gc()
    print(markdown(measure(args.bootstrap, args.messages, args.runs)))


if __name__ == "__main__":
    main()

"""Messages/s through SharedStreamManager + KafkaSharedStreamProducer, next to plain consume().

Same topic, same broker, same run: first a plain confluent-kafka ``consume()``
loop (the ceiling), then the manager with 1 and 10 watchers running the default
``KafkaSharedStreamTrigger`` filter (one UTF-8 TriggerEvent per message) into a
sink that confirms every unit of work at once (no persistence). A run ends when
every watcher has confirmed every message.

    python bench/kafka_throughput.py [--messages N] [--json out.json]

The broker is ``KAFKA_BOOTSTRAP_SERVERS`` or the local one the tests use
(``scripts/localservices``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from sharedstream.producer.rejections import InMemoryRejectionRecorder
from sharedstream.producer.runtime import configure_kafka_runtime
from sharedstream.triggerer.manager import SharedStreamManager
from sharedstream.triggerer.window import Window
from sharedstream.triggers.kafka import KafkaSharedStreamTrigger

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from localservices import KafkaBroker  # type: ignore[import-not-found]

PARTITIONS = 3


def fill(bootstrap: str, messages: int) -> str:
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    payload = json.dumps({"id": 0, "status": "paid", "amount": 12.5}).encode()
    for i in range(messages):
        while True:
            try:
                producer.produce(topic, payload, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.1)
    producer.flush(60)
    return topic


def plain(bootstrap: str, topic: str, messages: int) -> float:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    seen = 0
    start = 0.0
    while seen < messages:
        batch = consumer.consume(num_messages=1000, timeout=1.0)
        if batch and not start:
            start = time.perf_counter()
        seen += sum(1 for m in batch if m.error() is None)
    elapsed = time.perf_counter() - start
    consumer.close()
    return messages / elapsed


class CountingSink:
    """Confirms every unit of work at once: the manager + producer path without persistence."""

    def __init__(self, target: int) -> None:
        self.confirmed = 0
        self.target = target
        self.done = asyncio.Event()

    def submit(self, windows: Sequence[Window]) -> None:
        for window in windows:
            window.confirm()
        self.confirmed += len(windows)
        if self.confirmed >= self.target:
            self.done.set()


async def managed(bootstrap: str, topic: str, messages: int, watchers: int) -> float:
    conn_id = f"bench{watchers}"
    configure_kafka_runtime(
        {conn_id: {"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex}},
        InMemoryRejectionRecorder(),
    )
    sink = CountingSink(messages * watchers)
    manager = SharedStreamManager(sink)
    triggers = {f"w{i}": KafkaSharedStreamTrigger(topics=[topic], kafka_config_id=conn_id)
                for i in range(watchers)}
    manager.declare_cohort(next(iter(triggers.values())).shared_stream_key(), triggers)
    start = time.perf_counter()
    tasks = [asyncio.create_task(manager.run_watcher(n, t)) for n, t in triggers.items()]
    await sink.done.wait()
    elapsed = time.perf_counter() - start
    await manager.stop_all()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return messages / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    broker: Any = None
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if not bootstrap:
        broker = KafkaBroker()
        broker.start()
        bootstrap = broker.bootstrap
    try:
        topic = fill(bootstrap, args.messages)
        results = {
            "messages": args.messages,
            "plain_consume_msgs_per_s": round(plain(bootstrap, topic, args.messages)),
            "manager_1_watcher_msgs_per_s": round(
                asyncio.run(managed(bootstrap, topic, args.messages, 1))),
            "manager_10_watchers_msgs_per_s": round(
                asyncio.run(managed(bootstrap, topic, args.messages, 10))),
        }
    finally:
        if broker is not None:
            broker.stop()
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

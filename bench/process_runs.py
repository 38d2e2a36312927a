"""What the benches that time a real ``sharedstream run`` process share.

A watcher module keeping every message of ``$BENCH_TOPIC``, the command line that runs
the CLI from this checkout's installation, a topic filled with JSON messages, and the
tables to drop between rounds (every round starts from an empty database).
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from typing import Any

import sqlalchemy as sa
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

WATCHERS = '''
import os
from sharedstream import Asset, AssetWatcher, KafkaSharedStreamTrigger
orders = Asset("orders", watchers=[AssetWatcher("orders", KafkaSharedStreamTrigger(
    topics=[os.environ["BENCH_TOPIC"]], kafka_config_id="bench", poll_timeout=0.2))])
'''
COMMAND = [sys.executable, "-c", "from sharedstream.cli import main; main()"]


def fill(bootstrap: str, count: int, prefix: str = "bench") -> str:
    """A new 3-partition topic holding ``count`` messages ``{"id": n}``; its name."""
    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for n in range(count):
        producer.produce(topic, json.dumps({"id": n}).encode(), partition=n % 3)
        if n % 10000 == 0:
            producer.flush()
    producer.flush()
    return topic


def empty_database(engine: sa.Engine) -> None:
    """Drop every table sharedstream made, so the next round migrates from nothing."""
    metadata = sa.MetaData()
    with engine.begin() as connection:
        metadata.reflect(connection)
        metadata.drop_all(connection)  # in foreign-key order


def persisted_rate(engine: sa.Engine, process: Any, count: int) -> float:
    """Events/s of ``process`` from its first persisted event to its ``count``-th
    (start-up excluded), polling ``asset_event`` every 20 ms."""
    first: tuple[float, int] | None = None
    while True:
        with engine.connect() as connection:
            found = connection.execute(sa.text("SELECT COUNT(*) FROM asset_event")
                                       ).scalar_one() if sa.inspect(connection).has_table(
                                           "asset_event") else 0
        now = time.monotonic()
        if found and first is None:
            first = (now, found)
        if found >= count and first is not None:
            return (count - first[1]) / max(now - first[0], 1e-9)
        assert process.poll() is None, "the triggerer exited"
        time.sleep(0.02)

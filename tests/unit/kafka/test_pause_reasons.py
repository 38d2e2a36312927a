"""Why a paused partition is paused: the adapter says it, ``/status`` and ``/metrics`` show
it, all through the adapter contract (issue 26). In-memory broker, real adapter."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from ledger_driver import Driver
from sharedstream.core.backpressure import PauseReason
from sharedstream.core.counters import GroupCounters
from sharedstream.core.manager import GroupStatus
from sharedstream.core.snapshot import GroupSnapshot, PartitionView
from sharedstream.kafka.consumer import KafkaSharedConsumer
from sharedstream.kafka.memory import MemoryBroker
from sharedstream.kafka.rejections import InMemoryRejectionRecorder
from sharedstream.triggerer.metrics import PAUSED_BECAUSE, TriggererCollector
from sharedstream.triggerer.status import status_document
from sharedstream.uow.sink import SinkFigures

pytestmark = pytest.mark.unit

T = "orders"


async def eventually(check: Callable[[], bool]) -> None:
    for _ in range(500):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not met")


def view_of(adapter: KafkaSharedConsumer) -> Any:
    """A triggerer as status.py and metrics.py read it (their TriggererView protocol)."""
    status = GroupStatus("g", adapter, frozenset({"w"}), frozenset({"w"}), True, False, 0, 0,
                         GroupCounters())
    partition = PartitionView(T, 0, 0, 0, 3, 0, 0, 0, "bounded")
    manager = SimpleNamespace(status=lambda: [status],
                              snapshots=lambda: [(status, GroupSnapshot([partition], []))])
    sink = SimpleNamespace(queued=0, figures=SinkFigures())
    group = SimpleNamespace(key="g", consumer_group="app.orders")
    return SimpleNamespace(plan=SimpleNamespace(groups=[group]), manager=manager, sink=sink,
                           delivery=None, heartbeat=None, watchdog=None, registries=None,
                           readiness=lambda: [])


async def test_a_partition_at_its_bound_says_so_in_status_and_metrics() -> None:
    cluster = MemoryBroker({T: 1})
    for i in range(10):
        cluster.produce(T, f"m{i}".encode())
    adapter = KafkaSharedConsumer(
        topics=[T], config={"bootstrap.servers": "memory:9092", "group.id": "app",
                            "statistics.interval.ms": 0},
        recorder=InMemoryRejectionRecorder(), commit_interval=0.01, poll_timeout=0.01,
        consumer_factory=cluster.consumer, dlq_producer_factory=cluster.producer,
        topic_id_resolver=cluster.topic_ids, topic_id_check_interval=3600,
        revoke_timeout=0.5)  # close waits half of it for the 3 messages never resolved
    driver = Driver(adapter, max_in_flight=3)
    first = await driver.take(4)
    driver.hold(first[0])
    driver.ack(*first[1:4])  # 3 resolved above the held floor: the bound
    for i in range(10, 20):
        cluster.produce(T, f"m{i}".encode())
    await driver.take(1)  # the last admitted: the partition stops after it
    await eventually(lambda: bool(adapter.paused_partitions()))
    assert adapter.paused_partitions() == {(T, 0): PauseReason.PARTITION_BOUND}
    view = view_of(adapter)
    [group] = status_document(view)["groups"]
    assert group["partitions"][0]["paused_because"] == "partition_in_flight_bound"
    [family] = [f for f in TriggererCollector(view).collect()
                if f.name == PAUSED_BECAUSE.full_name]
    assert [(s.labels, s.value) for s in family.samples] == [
        ({"group": "app.orders", "topic": T, "partition": "0",
          "reason": "partition_in_flight_bound"}, 1.0)]
    await adapter.aclose()
    assert adapter.health().failed is None

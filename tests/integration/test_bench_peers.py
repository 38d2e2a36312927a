"""bench/peers.py's own logic on the real broker: its end mark is the log end, seen from outside.

The peers bench times each process until its consumer groups' committed offsets, read by
the bench itself, reach the log end. These check that plain confluent-kafka and
sharedstream runs get a figure only that way, and that a process that stops short of
the end fails the bench instead of reporting one (the peers themselves need the
``bench-peers`` extra, which the tests do not).
"""

from __future__ import annotations

import math
import uuid

import pytest
from bench import kafka_throughput as kt
from bench import peers
from bench.decode_once import value
from confluent_kafka import Consumer, TopicPartition

pytestmark = pytest.mark.integration

MESSAGES = 3_000


@pytest.fixture(scope="module")
def orders(kafka_bootstrap: str) -> str:
    return kt.fill(kafka_bootstrap, MESSAGES, value)


def committed(bootstrap: str, topic: str, group: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return sum(tp.offset for tp in consumer.committed(
            [TopicPartition(topic, p) for p in range(3)], timeout=10))
    finally:
        consumer.close()


@pytest.mark.parametrize(("side", "filters"), [("plain", 2), ("shared", 2), ("batch", 1)])
def test_a_run_ends_when_its_groups_commits_reach_the_log_end(
        kafka_bootstrap: str, orders: str, side: str, filters: int) -> None:
    group = f"test-peers-{uuid.uuid4().hex[:8]}"
    run = peers.timed_run(side, kafka_bootstrap, orders, MESSAGES, filters, keep=True,
                          group=group)
    groups = peers.groups_of(side, group, orders, filters)
    assert len(groups) == (filters if side == "plain" else 1)
    assert [committed(kafka_bootstrap, orders, g) for g in groups] == [MESSAGES] * len(groups)
    assert run["per_s"] > 0 and run["cpu_per_wall"] > 0
    assert run["startup_s"] > 0 and not math.isnan(run["startup_s"])


def test_a_process_that_stops_short_of_the_end_fails_the_bench(
        kafka_bootstrap: str, orders: str) -> None:
    # Told to stop after 500 records, the plain consumer commits what it read (at most
    # two batches of 1,000) and exits: the bench must not report a figure for it.
    with pytest.raises(RuntimeError, match=r"plain exited before its commits reached the "
                                           rf"log end \({MESSAGES}\)"):
        peers.timed_run("plain", kafka_bootstrap, orders, 500, 1, keep=False)

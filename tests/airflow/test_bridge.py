"""The asset bridge against two real Airflow 3 API servers and a real Kafka broker.

The publisher runs as ``sharedstream publish-airflow`` and the sink as
``sharedstream run`` (subprocesses, so killing them is a real crash). Every
assertion about "once" counts events in instance B carrying this test's marker
ids, and records on this test's topic.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from airflow_server import ONLY_IN_A, ORDERS, AirflowServer
from confluent_kafka import Consumer, TopicPartition

from sharedstream.airflowbridge.envelope import MARKER

WATCHERS = Path(__file__).with_name("bridge_watchers.py")
CLI = [sys.executable, "-c", "from sharedstream.cli import main; main()"]


class Bridge:
    """Config, topics and the two processes of one test."""

    def __init__(self, tmp: Path, servers: dict[str, AirflowServer], bootstrap: str,
                 topic: str, dlq: str) -> None:
        self.tmp, self.servers, self.bootstrap = tmp, servers, bootstrap
        self.topic, self.dlq = topic, dlq
        self.config = tmp / "sharedstream.toml"
        sections = "".join(
            f'[airflow.{name}]\nbase_url = "{s.base_url}"\nusername = "admin"\n'
            f'password = "{s.password}"\nmax_requests_per_second = 50.0\n\n'
            for name, s in servers.items())
        self.config.write_text(
            f'[database]\nurl = "sqlite:///{tmp / "bridge.db"}"\n\n'
            f'[triggerer]\nhealth_port = -1\nretry_backoff_max = 2.0\n'
            f'cohort_grace_period = 1.0\nshutdown_timeout = 5.0\n\n'
            f'[connections.kafka_default]\n"bootstrap.servers" = "{bootstrap}"\n'
            f'"group.id" = "bridge-{topic}"\n'
            # A killed sink's member must leave in seconds, not librdkafka's 45 s default,
            # before its restarted successor is given the partitions.
            f'"session.timeout.ms" = 6000\n"heartbeat.interval.ms" = 1000\n\n{sections}')
        self.env = {**os.environ, "SHAREDSTREAM_CONFIG": str(self.config),
                    "BRIDGE_TOPIC": topic, "BRIDGE_DLQ": dlq}
        self.processes: list[subprocess.Popen[bytes]] = []
        # Publisher and sink share the database: create the schema once, up front,
        # as an operator would, instead of letting both race to migrate it.
        subprocess.run([*CLI, "db", "upgrade", "--config", str(self.config)], env=self.env,
                       check=True, capture_output=True, timeout=120)

    def _spawn(self, args: list[str], log: str) -> subprocess.Popen[bytes]:
        out = (self.tmp / log).open("ab")
        process = subprocess.Popen([*CLI, *args],
                                   env=self.env, stdout=out, stderr=subprocess.STDOUT)
        self.processes.append(process)
        return process

    def publisher(self, *extra: str) -> subprocess.Popen[bytes]:
        return self._spawn(["publish-airflow", "--instance", "a", "--topic", self.topic,
                            "--interval", "0.2", *extra], "publisher.log")

    def publish_once(self, instance: str = "a") -> str:
        done = subprocess.run(
            [*CLI, "publish-airflow", "--instance", instance, "--topic", self.topic, "--once"],
            env=self.env, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def sink(self) -> subprocess.Popen[bytes]:
        return self._spawn(["run", str(WATCHERS)], "sink.log")

    def records(self, topic: str, expect: int, timeout: float = 30.0) -> list[dict[str, object]]:
        """Every record of ``topic`` up to its log end, once it holds at least ``expect``.

        Reading to the log end, rather than until a quiet spell, is what lets a caller
        count: a second copy written before the end offsets were read is in the list.
        """
        deadline = time.monotonic() + timeout
        while True:
            found = self._read_to_end(topic)
            if len(found) >= expect or time.monotonic() >= deadline:
                return found
            time.sleep(0.2)

    def _read_to_end(self, topic: str) -> list[dict[str, object]]:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"check-{topic}",
                             "enable.auto.commit": False})
        try:
            partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
            ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                    for p in partitions}
            unread = {p: high for p, (low, high) in ends.items() if high > low}
            consumer.assign([TopicPartition(topic, p, ends[p][0]) for p in unread])
            found: list[dict[str, object]] = []
            while unread:
                msg = consumer.poll(10)
                assert msg is not None, f"{topic}: nothing read below the log end {unread}"
                assert msg.error() is None, msg.error()
                p, offset = msg.partition(), msg.offset()
                if p in unread and offset < unread[p]:
                    found.append({"value": json.loads(msg.value()),
                                  "headers": dict(msg.headers() or [])})
                    if offset == unread[p] - 1:
                        del unread[p]
            return found
        finally:
            consumer.close()

    def stop_all(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(20)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(10)


def delivered_to_b(servers: dict[str, AirflowServer], ids: set[int]) -> Counter[int]:
    """How many events of ``orders`` in B carry the marker of each source event id."""
    counts: Counter[int] = Counter()
    for event in servers["b"].events(ORDERS[1]):
        marker = (event.get("extra") or {}).get(MARKER)  # type: ignore[union-attr]
        if marker and marker["source"] == "a" and marker["event_id"] in ids:
            counts[marker["event_id"]] += 1
    return counts


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.5)


@pytest.fixture
def bridge(tmp_path: Path, airflow_pair: dict[str, AirflowServer], kafka_bootstrap: str,
           create_topic: Callable[..., str]) -> Iterator[Bridge]:
    made = Bridge(tmp_path, airflow_pair, kafka_bootstrap, create_topic("bridge", 3),
                  create_topic("bridge-dlq"))
    try:
        yield made
    finally:
        made.stop_all()


def test_event_in_a_reaches_kafka_once_and_b_once(bridge: Bridge) -> None:
    a = bridge.servers["a"]
    event_id = a.create_event(ORDERS[1], {"run": "once", "rows": 3})
    bridge.publish_once()
    bridge.publish_once()  # nothing new: the cursor moved past it
    mine = [r for r in bridge.records(bridge.topic, expect=1)
            if r["value"]["event_id"] == event_id]  # type: ignore[index]
    assert len(mine) == 1
    envelope = mine[0]["value"]
    assert envelope["source"] == "a" and envelope["version"] == 1  # type: ignore[index]
    assert envelope["asset"] == {"name": ORDERS[0], "uri": ORDERS[1]}  # type: ignore[index]
    assert envelope["extra"]["rows"] == 3  # type: ignore[index]

    bridge.sink()
    wait_for(lambda: delivered_to_b(bridge.servers, {event_id})[event_id] >= 1, 60,
             "the event in B")
    # A later event of the same asset travels the same partition (keyed by the asset's
    # URI): once it is in B, a duplicate of the first would have been posted before it.
    later = a.create_event(ORDERS[1], {"run": "later"})
    bridge.publish_once()
    wait_for(lambda: delivered_to_b(bridge.servers, {later})[later] == 1, 60,
             "a later event of the same asset in B")
    assert delivered_to_b(bridge.servers, {event_id}) == {event_id: 1}
    copy = next(e for e in bridge.servers["b"].events(ORDERS[1])
                if (e.get("extra") or {}).get(MARKER) == {"source": "a", "event_id": event_id})
    assert copy["extra"]["rows"] == 3  # type: ignore[index]

    # Loop prevention: B's publisher skips the bridged copy instead of sending it back.
    out = bridge.publish_once("b")
    assert "published 0" in out and "skipped 2 bridged" in out, out


def test_asset_missing_in_target_goes_to_the_dlq_with_its_reason(bridge: Bridge) -> None:
    event_id = bridge.servers["a"].create_event(ONLY_IN_A[1], {"n": 1})
    bridge.publish_once()
    bridge.sink()
    dead = [r for r in bridge.records(bridge.dlq, expect=1, timeout=60)
            if r["value"]["event_id"] == event_id]  # type: ignore[index]
    assert len(dead) == 1
    reasons = b" ".join(v for v in dead[0]["headers"].values()  # type: ignore[union-attr]
                        if isinstance(v, bytes))
    assert b"has no asset" in reasons and b"only_in_a" in reasons, dead[0]["headers"]


def test_killed_publisher_and_sink_lose_and_duplicate_nothing(bridge: Bridge) -> None:
    a = bridge.servers["a"]
    ids = {a.create_event(ORDERS[1], {"n": n}) for n in range(40)}
    publisher = bridge.publisher("--batch-size", "5")
    sink = bridge.sink()
    wait_for(lambda: len(delivered_to_b(bridge.servers, ids)) >= 5, 120, "a first delivery")
    publisher.kill()  # SIGKILL: no shutdown path runs
    sink.kill()
    publisher.wait(10)
    sink.wait(10)
    more = {a.create_event(ORDERS[1], {"n": n}) for n in range(40, 50)}
    ids |= more
    assert len(delivered_to_b(bridge.servers, ids)) < len(ids)
    bridge.publisher("--batch-size", "5")
    bridge.sink()
    wait_for(lambda: len(delivered_to_b(bridge.servers, ids)) == len(ids), 180,
             "every event in B")
    # The positive marker after any duplicate: a later event of the same asset (same
    # partition, behind every one of them) has reached B too.
    later = a.create_event(ORDERS[1], {"n": "later"})
    wait_for(lambda: delivered_to_b(bridge.servers, {later})[later] == 1, 120,
             "a later event of the same asset in B")
    counts = delivered_to_b(bridge.servers, ids)
    assert set(counts) == ids and set(counts.values()) == {1}, counts


def test_target_down_holds_the_event_across_retries_then_delivers(bridge: Bridge) -> None:
    a, b = bridge.servers["a"], bridge.servers["b"]
    bridge.sink()
    first = a.create_event(ORDERS[1], {"phase": "before"})
    bridge.publish_once()
    wait_for(lambda: delivered_to_b(bridge.servers, {first})[first] == 1, 60, "warm-up event")
    b.stop()
    try:
        held = a.create_event(ORDERS[1], {"phase": "outage"})
        bridge.publish_once()
        # The outage under test lasts until the sink has failed to post the event and
        # tried again: it holds the event (no dead letter) across its own retries.
        sink_log = bridge.tmp / "sink.log"
        wait_for(lambda: sink_log.read_text().count("AirflowUnavailableError") >= 2, 120,
                 "the sink failing twice while B is down")
    finally:
        b.start()
    wait_for(lambda: delivered_to_b(bridge.servers, {held})[held] == 1, 60,
             "the held event after B came back")
    # Held, not dead-lettered (the DLQ may hold earlier tests' only_in_a events: this
    # test's fresh cursor republishes A's whole history).
    dead = bridge.records(bridge.dlq, expect=0, timeout=3)
    assert [r for r in dead if r["value"]["event_id"] in (first, held)] == []  # type: ignore[index]
    later = a.create_event(ORDERS[1], {"phase": "after"})
    bridge.publish_once()
    wait_for(lambda: delivered_to_b(bridge.servers, {later})[later] == 1, 60,
             "a later event of the same asset in B")
    assert delivered_to_b(bridge.servers, {first, held}) == {first: 1, held: 1}

"""``sharedstream offsets show|reset`` against the real broker.

Groups are committed by a plain confluent-kafka consumer, the way the producer
commits (offset + ``ss1:`` progress metadata), so the commands are checked
against the broker's real answers rather than against our own writer.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from kafka_writes import ordered_producer
from sharedstream.cli import cli
from sharedstream.kafka.progress import encode_progress
from sharedstream.statestore.models import stream_group
from sharedstream.statestore.store import StateStore

BASE_MS = 1_700_000_000_000  # message i of a partition is stamped BASE_MS + i seconds
Invoke = Callable[..., Result]


@pytest.fixture
def base(kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A connection ``kafka_default`` whose group.id is unique to the test."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SHAREDSTREAM_CONFIG", raising=False)
    group_id = f"ops-{uuid.uuid4().hex[:8]}"
    (tmp_path / "sharedstream.toml").write_text(
        f'[connections.kafka_default]\n"bootstrap.servers" = "{kafka_bootstrap}"\n'
        f'"group.id" = "{group_id}"\n')
    return group_id


@pytest.fixture
def invoke() -> Invoke:
    runner = CliRunner()

    def run(*args: str, code: int = 0, input: str | None = None) -> Result:
        result = runner.invoke(cli, list(args), input=input)
        assert result.exit_code == code, result.output
        return result

    return run


def produce(bootstrap: str, topic: str, per_partition: dict[int, int]) -> None:
    producer = ordered_producer(bootstrap)
    for partition, n in per_partition.items():
        for i in range(n):
            producer.produce(topic, f"m{i}".encode(), partition=partition,
                             timestamp=BASE_MS + i * 1000)
    assert producer.flush(30) == 0


def commit(bootstrap: str, group: str, offsets: list[TopicPartition]) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    try:
        consumer.commit(offsets=offsets, asynchronous=False)
    finally:
        consumer.close()


def committed(admin: AdminClient, group: str) -> dict[int, tuple[int, str]]:
    result = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)])[group].result(timeout=10)
    return {tp.partition: (tp.offset, tp.metadata or "") for tp in result.topic_partitions}


@pytest.fixture
def orders(kafka_bootstrap: str, create_topic: Callable[..., str], base: str
           ) -> tuple[str, str]:
    """Topic with 2 partitions (5 and 3 messages), its group committed at 2 (+4, 5
    remembered) on partition 0 and at 3 on partition 1."""
    topic = create_topic("orders", partitions=2)
    produce(kafka_bootstrap, topic, {0: 5, 1: 3})
    group = f"{base}.{topic}"
    commit(kafka_bootstrap, group, [TopicPartition(topic, 0, 2, encode_progress(2, [3, 4])),
                                    TopicPartition(topic, 1, 3)])
    return topic, group


def test_show(orders: tuple[str, str], invoke: Invoke, tmp_path: Path) -> None:
    topic, group = orders
    data = json.loads(invoke("offsets", "show", "--group", group, "--json").stdout)
    assert (data["group"], data["state"], data["live_members"]) == (group, "EMPTY", 0)
    rows = [(p["topic"], p["partition"], p["committed"], p["remembered"], p["log_end"],
             p["lag"]) for p in data["partitions"]]
    assert rows == [(topic, 0, 2, [3, 4], 5, 3), (topic, 1, 3, [], 3, 0)]
    table = invoke("offsets", "show", "--group", group).stdout
    assert "3-4 (2)" in table and "0 live member(s)" in table

    # --watcher resolves through the stream_group table the triggerer writes.
    url = f"sqlite:///{tmp_path / 'groups.db'}"
    with StateStore.from_url(url) as store:
        store.upgrade()
        with store.engine.begin() as connection:
            connection.execute(stream_group.insert(), [{
                "group_key": json.dumps(["kafka-shared-stream", [topic], "kafka_default"]),
                "consumer_group": group, "watchers": json.dumps(["w_a", "w_b"])}])
    by_watcher = json.loads(invoke("offsets", "show", "--watcher", "w_b", "--database-url",
                                   url, "--json").stdout)
    assert by_watcher["group"] == group


def test_show_without_options_shows_every_group_of_the_connection(
        orders: tuple[str, str], kafka_bootstrap: str, create_topic: Callable[..., str],
        base: str, invoke: Invoke, tmp_path: Path) -> None:
    """Issue 43: ``offsets show`` alone exited 2 (``give exactly one of --group GROUP or
    --watcher W``); it shows every shared-stream group of the connection (its
    ``<group.id>.`` prefix), and which of them no recorded watcher reads any more."""
    topic, group = orders
    other_topic = create_topic("returns", partitions=1)
    produce(kafka_bootstrap, other_topic, {0: 2})
    other = f"{base}.{other_topic}"
    commit(kafka_bootstrap, other, [TopicPartition(other_topic, 0, 1)])
    commit(kafka_bootstrap, f"not-{base}.{topic}", [TopicPartition(topic, 0, 1)])
    url = f"sqlite:///{tmp_path / 'groups.db'}"
    with StateStore.from_url(url) as store:
        store.upgrade()
        with store.engine.begin() as connection:
            connection.execute(stream_group.insert(), [{
                "group_key": json.dumps(["kafka-shared-stream", [topic], "kafka_default"]),
                "consumer_group": group, "watchers": json.dumps(["w_a"])}])

    data = json.loads(invoke("offsets", "show", "--database-url", url, "--json").stdout)
    shown = {g["group"]: g for g in data["groups"]}
    assert sorted(shown) == [group, other]  # the connection's prefix only
    assert [(p["partition"], p["committed"], p["lag"]) for p in shown[group]["partitions"]] \
        == [(0, 2, 3), (1, 3, 0)]
    assert (shown[group]["left_behind"], shown[other]["left_behind"]) == (False, True)
    text = invoke("offsets", "show", "--database-url", url).stdout
    assert group in text and other in text
    assert f"left behind: {other}" in text and f"left behind: {group}" not in text
    # Without a database nobody can tell which groups are in use: every group, a note.
    alone = invoke("offsets", "show").stdout
    assert group in alone and other in alone and "left behind:" not in alone
    assert "no database" in alone


def test_show_a_group_that_committed_nothing_yet(
        kafka_bootstrap: str, create_topic: Callable[..., str], base: str,
        invoke: Invoke) -> None:
    topic = create_topic("fresh", partitions=1)
    produce(kafka_bootstrap, topic, {0: 4})
    group = f"{base}.{topic}"
    with live_member(kafka_bootstrap, group, topic):
        data = json.loads(invoke("offsets", "show", "--group", group, "--json").stdout)
    assert data["live_members"] == 1
    [row] = data["partitions"]
    assert (row["committed"], row["log_end"], row["lag"]) == (None, 4, 4)


def test_missing_group_and_topic(orders: tuple[str, str], base: str,
                                 invoke: Invoke) -> None:
    _topic, group = orders
    missing = invoke("offsets", "show", "--group", f"{base}.no-such-topic", code=1)
    assert "not found" in missing.stderr and missing.stderr.count("\n") == 1
    wrong = invoke("offsets", "reset", "--group", group, "--to", "earliest", "--topic",
                   "elsewhere", "--yes", code=1)
    assert "'elsewhere' is not one of group" in wrong.stderr


def test_reset_earliest_latest_and_timestamp(
        orders: tuple[str, str], kafka_admin: AdminClient, invoke: Invoke) -> None:
    topic, group = orders

    dry = json.loads(invoke("offsets", "reset", "--group", group, "--to", "earliest",
                            "--dry-run", "--json").stdout)
    assert [(p["before"], p["remembered_before"], p["after"]) for p in dry["partitions"]] == [
        (2, 2, 0), (3, 0, 0)]
    assert committed(kafka_admin, group)[0][0] == 2  # a dry run changes nothing

    out = invoke("offsets", "reset", "--group", group, "--to", "earliest", "--yes").stdout
    assert "reset 2 partition(s)" in out
    assert committed(kafka_admin, group) == {0: (0, ""), 1: (0, "")}  # progress cleared

    invoke("offsets", "reset", "--group", group, "--to", "latest", "--yes")
    assert committed(kafka_admin, group) == {0: (5, ""), 1: (3, "")}

    # The first offset stamped at or after the time; past the last message: the log end.
    at = datetime.fromtimestamp((BASE_MS + 2500) / 1000, tz=UTC).isoformat()
    invoke("offsets", "reset", "--group", group, "--to", at, "--yes")
    assert committed(kafka_admin, group) == {0: (3, ""), 1: (3, "")}

    invoke("offsets", "reset", "--group", group, "--to", "earliest", "--topic", topic,
           "--partition", "1", "--yes")
    assert committed(kafka_admin, group) == {0: (3, ""), 1: (0, "")}

    declined = invoke("offsets", "reset", "--group", group, "--to", "latest", code=1,
                      input="n\n")
    assert "Aborted" in declined.output
    assert committed(kafka_admin, group) == {0: (3, ""), 1: (0, "")}
    invoke("offsets", "reset", "--group", group, "--to", "latest", input="y\n")
    assert committed(kafka_admin, group) == {0: (5, ""), 1: (3, "")}


@contextlib.contextmanager
def live_member(bootstrap: str, group: str, topic: str) -> Iterator[None]:
    """A consumer subscribed to ``topic`` in ``group``, polling in its own thread until
    the block ends (then closed, which leaves the group at once)."""
    assigned, stop = threading.Event(), threading.Event()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False, "session.timeout.ms": 6000})
    consumer.subscribe([topic], on_assign=lambda _c, _p: assigned.set())

    def poll() -> None:
        while not stop.is_set():
            consumer.poll(0.1)
        consumer.close()

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        assert assigned.wait(30), "the consumer never got its partitions"
        yield
    finally:
        stop.set()
        thread.join(timeout=30)
    assert not thread.is_alive()


def wait_until(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met before the deadline"
        time.sleep(0.1)


def test_reset_refused_while_the_group_has_live_members(
        orders: tuple[str, str], kafka_admin: AdminClient, kafka_bootstrap: str,
        invoke: Invoke) -> None:
    topic, group = orders

    def members() -> int:
        shown = json.loads(invoke("offsets", "show", "--group", group, "--json").stdout)
        return int(shown["live_members"])

    with live_member(kafka_bootstrap, group, topic):
        wait_until(lambda: members() == 1)
        refused = invoke("offsets", "reset", "--group", group, "--to", "earliest", "--yes",
                         code=1)
        assert "1 live member(s)" in refused.stderr and "stop every triggerer" in refused.stderr
        assert committed(kafka_admin, group)[0][0] == 2
    wait_until(lambda: members() == 0)
    invoke("offsets", "reset", "--group", group, "--to", "earliest", "--yes")
    assert committed(kafka_admin, group)[0] == (0, "")

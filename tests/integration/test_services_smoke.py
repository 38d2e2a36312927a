"""The test services are real: an Apache Kafka broker, PostgreSQL, MariaDB.

These fail (never skip) when a service is missing, so a green run proves the
integration suite ran against the real thing.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import sqlalchemy as sa
from confluent_kafka import Consumer, KafkaError, Message, TopicPartition
from confluent_kafka.admin import AdminClient

from kafka_writes import ordered_producer

MESSAGES = 1_000
PARTITIONS = 3


def _consume(consumer: Consumer, count: int, timeout: float = 60.0) -> list[Message]:
    """Poll until ``count`` messages arrived or the deadline passes."""
    received: list[Message] = []
    deadline = time.monotonic() + timeout
    while len(received) < count and time.monotonic() < deadline:
        for msg in consumer.consume(num_messages=500, timeout=1.0):
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    continue
                raise AssertionError(f"consumer error: {error}")
            received.append(msg)
    return received


def test_broker_is_a_real_apache_kafka(kafka_admin: AdminClient) -> None:
    # librdkafka's mock cluster reports no controller and no real cluster id
    # through DescribeCluster; a KRaft broker gives a 22-character base64 id.
    cluster = kafka_admin.describe_cluster(request_timeout=10).result(timeout=15)
    assert cluster.cluster_id and len(cluster.cluster_id) == 22
    assert cluster.controller is not None
    assert [node.host for node in cluster.nodes] != ["localhost.mock"]
    # And it refuses to auto-create topics, which the mock cluster always does.
    missing = f"missing-{uuid.uuid4().hex}"
    meta = kafka_admin.list_topics(topic=missing, timeout=10).topics[missing]
    assert meta.error is not None
    assert meta.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_keyed_messages_and_committed_offsets(kafka_bootstrap: str,
                                              create_topic: Callable[..., str]) -> None:
    topic = create_topic("smoke", partitions=PARTITIONS)
    producer = ordered_producer(kafka_bootstrap, {"linger.ms": 5})
    failures: list[KafkaError] = []

    def delivered(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            failures.append(err)

    for i in range(MESSAGES):
        producer.produce(topic, key=f"key-{i % 50}".encode(), value=f"value-{i}".encode(),
                         on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert failures == []

    group = f"smoke-{uuid.uuid4().hex[:8]}"
    config = {"bootstrap.servers": kafka_bootstrap, "group.id": group,
              "auto.offset.reset": "earliest", "enable.auto.commit": False}
    first = Consumer(config)
    first.subscribe([topic])
    received = _consume(first, MESSAGES)
    assert len(received) == MESSAGES
    assert {m.value() for m in received} == {f"value-{i}".encode() for i in range(MESSAGES)}
    assert {m.partition() for m in received} == set(range(PARTITIONS))
    # Keyed messages: one key always lands on one partition.
    partition_of: dict[bytes | None, set[int | None]] = {}
    for msg in received:
        partition_of.setdefault(msg.key(), set()).add(msg.partition())
    assert all(len(parts) == 1 for parts in partition_of.values())

    # Commit a point in the middle of partition 0 and read it back elsewhere.
    on_zero = sorted(m.offset() or 0 for m in received if m.partition() == 0)
    target = on_zero[len(on_zero) // 2]
    first.commit(offsets=[TopicPartition(topic, 0, target)], asynchronous=False)
    first.close()

    second = Consumer(config)
    try:
        committed = second.committed([TopicPartition(topic, 0)], timeout=15)
        assert committed[0].offset == target
        second.assign([TopicPartition(topic, 0, committed[0].offset)])
        resumed = _consume(second, len(on_zero) - target)
        assert [m.offset() for m in resumed] == on_zero[target:]
    finally:
        second.close()


def _roundtrip(url: str) -> None:
    engine = sa.create_engine(url)
    table = f"smoke_{uuid.uuid4().hex[:8]}"
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, "
                                 "body VARCHAR(100) NOT NULL)"))
            conn.execute(sa.text(f"INSERT INTO {table} (id, body) VALUES (1, :body)"),
                         {"body": "héllo"})
        with engine.connect() as conn:
            assert conn.execute(sa.text(f"SELECT body FROM {table} WHERE id = 1")).scalar() \
                == "héllo"
        with engine.begin() as conn:
            conn.execute(sa.text(f"DROP TABLE {table}"))
    finally:
        engine.dispose()


def test_postgresql_roundtrip(database_url: str) -> None:
    assert database_url.startswith("postgresql+psycopg://")
    _roundtrip(database_url)
    engine = sa.create_engine(database_url)
    with engine.connect() as conn:
        assert "PostgreSQL" in conn.execute(sa.text("SELECT version()")).scalar_one()
    engine.dispose()


def test_mariadb_roundtrip(mariadb_url: str) -> None:
    assert mariadb_url.startswith("mysql+pymysql://")
    _roundtrip(mariadb_url)
    engine = sa.create_engine(mariadb_url)
    with engine.connect() as conn:
        assert "MariaDB" in conn.execute(sa.text("SELECT version()")).scalar_one()
    engine.dispose()

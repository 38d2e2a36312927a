"""A secured broker (SASL_SSL, SCRAM-SHA-512, TLS from a CA the test makes), as production
Kafka is (MSK, Confluent Cloud, Aiven).

One broker for the module, with two SASL_SSL listeners beside its PLAINTEXT one (which
creates the topics and checks the commits): ``SASL_SSL`` with a certificate the test CA
signed for 127.0.0.1, and ``EXPIRED`` with one that CA signed but whose validity ended
yesterday. Through the secured listener: the manager consumes and commits, a rejected
message reaches the dead-letter topic, and ``sharedstream dlq replay`` runs with the
connection given key by key in the environment. Through ``sharedstream run``'s start-up:
a wrong password, a CA that did not sign the broker's certificate and an expired
certificate are each one ``error:`` line naming the connection and the fix, at once
(not after ``broker_timeout``), without the password.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from localservices.kafka import SCRAM_MECHANISM, KafkaBroker, SaslSslListener
from localservices.tls import CertificateAuthority
from test_kafka_manager import SETTINGS, DictSink, Scripted, Triggerer, committed_at
from test_kafka_shared_stream import until

from kafka_writes import ordered_producer
from sharedstream.core.message import Coordinates
from sharedstream.kafka import dlq_headers as h
from sharedstream.kafka.rejections import InMemoryRejectionRecorder
from sharedstream.kafka.runtime import configure_kafka_runtime, kafka_runtime

USER, PASSWORD = "triggerer", "scram-pa55word-never-shown"
WRONG_PASSWORD = "wrong-pa55word-never-shown"
ORDERS = Path(__file__).resolve().parents[1] / "e2e" / "watchers" / "orders.py"
COMMAND = (sys.executable, "-c", "from sharedstream.cli import main; main()")
BROKER_TIMEOUT = 30.0  # what start-up would wait for a broker that does not answer


@dataclass(frozen=True)
class SecuredBroker:
    plaintext: str      # topic admin and offset checks
    secured: str        # SASL_SSL, certificate signed by ``ca``
    expired: str        # SASL_SSL, certificate signed by ``ca``, expired
    ca: Path            # the CA that signed both certificates
    other_ca: Path      # a CA that signed neither

    def connection(self, **overrides: Any) -> dict[str, Any]:
        """A librdkafka config for the secured listener, as production would have it."""
        return {"bootstrap.servers": self.secured, "security.protocol": "SASL_SSL",
                "sasl.mechanisms": SCRAM_MECHANISM, "sasl.username": USER,
                "sasl.password": PASSWORD, "ssl.ca.location": str(self.ca), **overrides}

    def topics(self, *bases: str) -> list[str]:
        """Fresh topics (one partition each), created through the PLAINTEXT listener."""
        names = [f"{base}-{uuid.uuid4().hex[:8]}" for base in bases]
        admin = AdminClient({"bootstrap.servers": self.plaintext})
        for future in admin.create_topics(
                [NewTopic(n, num_partitions=1, replication_factor=1) for n in names]).values():
            future.result(30)
        deadline = time.monotonic() + 30
        for name in names:
            while True:
                meta = admin.list_topics(topic=name, timeout=5).topics.get(name)
                if meta is not None and meta.error is None and meta.partitions and all(
                        p.leader >= 0 for p in meta.partitions.values()):
                    break
                assert time.monotonic() < deadline, f"{name} has no leader"
                time.sleep(0.05)
        return names


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredBroker]:
    certs = tmp_path_factory.mktemp("certs")
    ca = CertificateAuthority(certs / "ca", "sharedstream test CA")
    other = CertificateAuthority(certs / "other", "some other CA")
    good, old = ca.issue("broker"), ca.issue("broker-expired", expired=True)
    broker = KafkaBroker(sasl_ssl=[SaslSslListener("SASL_SSL", good.keystore),
                                   SaslSslListener("EXPIRED", old.keystore)],
                         scram_users={USER: PASSWORD})
    broker.start()
    try:
        yield SecuredBroker(broker.bootstrap, broker.bootstrap_of("SASL_SSL"),
                            broker.bootstrap_of("EXPIRED"), ca.cert, other.cert)
    finally:
        broker.stop()


def read_all(config: dict[str, Any], topic: str, count: int) -> list[Any]:
    """The first ``count`` records of ``topic`` (partition 0), read with ``config``."""
    reader = Consumer({**config, "group.id": f"reader-{uuid.uuid4().hex[:8]}",
                       "enable.auto.commit": False})
    reader.assign([TopicPartition(topic, 0, 0)])
    records: list[Any] = []
    deadline = time.monotonic() + 30
    try:
        while len(records) < count:
            assert time.monotonic() < deadline, f"{topic}: {len(records)} of {count} records"
            records += [m for m in reader.consume(count, 0.2) if m.error() is None]
    finally:
        reader.close()
    return records


async def test_the_manager_consumes_commits_and_dead_letters_through_sasl_ssl(
        secured: SecuredBroker) -> None:
    topic, dlq = secured.topics("orders", "orders-dlq")
    connection = {**secured.connection(), "group.id": f"it-{uuid.uuid4().hex[:8]}"}
    producer = ordered_producer(secured.secured, secured.connection())  # secured writes too
    for i in range(5):
        producer.produce(topic, f"m{i}".encode(), headers=[("trace", b"t")])
    assert producer.flush(30) == 0
    before = kafka_runtime()
    configure_kafka_runtime({"secure": connection}, InMemoryRejectionRecorder())
    sink = DictSink()
    watchers = {"all": Scripted(topics=[topic], kafka_config_id="secure", dlq_topic=dlq),
                "picky": Scripted(lambda m: "reject" if m.value == b"m3" else "event",
                                  topics=[topic], kafka_config_id="secure", dlq_topic=dlq)}
    triggerer = await Triggerer.start(sink, watchers, SETTINGS)
    group = f"{connection['group.id']}.{topic}"
    try:
        await until(lambda: len(sink.offsets("all")) == 5 and len(sink.offsets("picky")) == 4)
        deadline = time.monotonic() + 60
        while await committed_at(secured.plaintext, group, topic) != [5]:
            assert time.monotonic() < deadline, "the commit did not reach 5"
            await triggerer.producer.commit()
    finally:
        await triggerer.stop()
        configure_kafka_runtime(before.connections, before.recorder, before.environ)
    assert sink.offsets("picky") == [(0, 0), (0, 1), (0, 2), (0, 4)]
    [record] = read_all(secured.connection(), dlq, 1)
    headers: dict[str, Any] = dict(record.headers() or [])
    assert record.value() == b"m3" and headers["trace"] == b"t"
    assert headers[h.ORIGINAL_TOPIC] == topic.encode() and headers[h.ORIGINAL_OFFSET] == b"3"
    assert json.loads(headers[h.REJECTIONS]) == {"picky": "rejected b'm3'"}
    assert headers[h.CONSUMER_GROUP] == group.encode()


def environment(connection_id: str, config: dict[str, Any]) -> dict[str, str]:
    """The connection as ``SHAREDSTREAM_CONN_<ID>__<KEY>`` variables, one per key."""
    prefix = f"SHAREDSTREAM_CONN_{connection_id.upper()}__"
    return {prefix + key.upper().replace(".", "_"): str(value) for key, value in config.items()}


def run_cli(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("SHAREDSTREAM_CONN_", "AIRFLOW_CONN_", "SHAREDSTREAM__"))
             and k != "SHAREDSTREAM_CONFIG"}
    return subprocess.run([*COMMAND, *args], cwd=cwd, env={**clean, **env},
                          capture_output=True, text=True, timeout=120, check=False)


def test_dlq_replay_through_sasl_ssl_with_the_connection_from_the_environment(
        secured: SecuredBroker, tmp_path: Path) -> None:
    source, dlq = secured.topics("orders", "orders-dlq")
    writer = ordered_producer(secured.plaintext)
    for i in range(3):
        writer.produce(dlq, f"v{i}".encode(), f"k{i}".encode(), headers=h.build_dlq_headers(
            original_headers=[("trace", f"t{i}".encode())],
            origin=Coordinates(source, "TID", 0, i, 1_700_000_000_000 + i),
            consumer_group="g", rejections={"picky": "bad"}, replay_count=0))
    assert writer.flush(30) == 0
    # The file has a stale password; each key from the environment wins over it.
    config = tmp_path / "sharedstream.toml"
    config.write_text('[connections.secure]\n"bootstrap.servers" = "127.0.0.1:9"\n'
                      f'"sasl.password" = "{WRONG_PASSWORD}"\n')
    env = environment("secure", secured.connection())
    result = run_cli(["dlq", "replay", dlq, "--connection", "secure", "--config", str(config),
                      "--to-topic", "ORIGINAL", "--json"], env, tmp_path)
    assert result.returncode == 0, result.stderr
    assert PASSWORD not in result.stdout + result.stderr
    summary = json.loads(result.stdout)
    assert (summary["replayed"], summary["examined"]) == (3, 3), summary
    replayed = read_all(secured.connection(), source, 3)
    assert [(m.key(), m.value()) for m in replayed] == [(f"k{i}".encode(), f"v{i}".encode())
                                                        for i in range(3)]
    replay_group = Consumer({"bootstrap.servers": secured.plaintext,
                             "group.id": f"sharedstream-dlq-replay.{dlq}"})
    assert [tp.offset for tp in replay_group.committed([TopicPartition(dlq, 0)],
                                                       timeout=10)] == [3]
    replay_group.close()


BAD = {
    # name: (connection overrides, listener, exit code, what the line must say)
    "wrong password": ({"sasl.password": WRONG_PASSWORD}, "secured", 2,
                       ["SASL authentication failed", f"sasl.username '{USER}'",
                        "check sasl.username/sasl.password"]),
    "unknown CA": ({}, "secured", 2,
                   ["TLS: the broker's certificate is not signed by ssl.ca.location's CA",
                    "set ssl.ca.location to the CA that signed it"]),
    "expired certificate": ({}, "expired", 1,
                            ["TLS: the broker's certificate has expired",
                             "must be renewed"]),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_refused_secured_connection_is_one_error_line_at_once(
        case: str, secured: SecuredBroker, tmp_path: Path) -> None:
    overrides, listener, code, needles = BAD[case]
    [topic] = secured.topics("orders")
    connection = secured.connection(**overrides)
    connection["bootstrap.servers"] = getattr(secured, listener)
    if case == "unknown CA":
        connection["ssl.ca.location"] = str(secured.other_ca)
    config = tmp_path / "sharedstream.toml"
    config.write_text(f'[database]\nurl = "sqlite:///{tmp_path / "state.db"}"\n\n'
                      f"[triggerer]\nbroker_timeout = {BROKER_TIMEOUT}\n")
    result = run_cli(["run", str(ORDERS), "--config", str(config)],
                     {**environment("e2e", connection), "E2E_TOPIC": topic}, tmp_path)
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    assert connection["sasl.password"] not in result.stdout + result.stderr
    [line] = [line for line in result.stderr.splitlines() if line]
    assert line.startswith("error: connection 'e2e': "), line
    for needle in needles:
        assert needle in line, (needle, line)
    # Told from the refusal itself, not from waiting out broker_timeout (which says
    # "no broker ... answered within 30s"): the operator learns the cause at once.
    assert "answered within" not in line, line
    assert not (tmp_path / "state.db").exists()  # refused before the database

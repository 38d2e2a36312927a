"""``examples/embedded_service.py`` run as a user runs it, with a triggerer that fails.

A user copying the example must get what ``sharedstream run`` gives: one ``error:`` line
naming the problem, exit code 1, no traceback. The example's watchers read the fixed
topics ``orders`` and ``orders.dlq``, so they are made on the test broker if absent and
left there (other runs of this test may be using them; no other test reads them). The
database is a SQLite file in a directory that does not exist: the triggerer's start
fails at once, after the topic checks, as with any database that does not answer.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from triggerer import until

from kafka_probe import committed_partitions
from kafka_writes import ordered_producer

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "embedded_service.py"


def ensure_topics(admin: AdminClient, names: list[str]) -> None:
    for name, future in admin.create_topics(
            [NewTopic(n, num_partitions=1, replication_factor=1) for n in names],
            operation_timeout=30).items():
        try:
            future.result(timeout=30)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise AssertionError(f"topic {name} not created: {exc}") from None


def test_the_example_reports_a_failing_triggerer_as_one_error_line(
        tmp_path: Path, kafka_bootstrap: str, kafka_admin: AdminClient) -> None:
    ensure_topics(kafka_admin, ["orders", "orders.dlq"])
    database = f"sqlite:///{tmp_path / 'no-such-dir' / 'embedded.db'}"
    env = {**os.environ, "KAFKA_BOOTSTRAP": kafka_bootstrap, "DATABASE_URL": database,
           "PORT": "0"}
    done = subprocess.run([sys.executable, str(EXAMPLE)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert len(errors) == 1, done.stderr
    assert "database" in errors[0] and "not reachable" in errors[0], errors


def produce_one(bootstrap: str, value: str) -> tuple[int, int]:
    """(partition, offset) of one record produced to ``orders``."""
    delivered: list[tuple[int, int]] = []

    def note(error: object, message: Any) -> None:
        assert error is None, error
        delivered.append((message.partition(), message.offset()))

    producer = ordered_producer(bootstrap)
    producer.produce("orders", value.encode(), on_delivery=note)
    assert producer.flush(30) == 0
    [found] = delivered
    return found


def test_the_example_stops_on_sigterm_committing_what_it_persisted(
        tmp_path: Path, kafka_bootstrap: str, kafka_admin: AdminClient) -> None:
    """The cancellation pattern docs/embedding.md shows, as the example runs it: SIGTERM
    cancels the service's task, leaving the block commits the offsets of what was
    persisted, the CancelledError ends the service with exit 0."""
    ensure_topics(kafka_admin, ["orders", "orders.dlq", "orders.dlq.replay"])
    database = tmp_path / "embedded.db"
    env = {**os.environ, "KAFKA_BOOTSTRAP": kafka_bootstrap,
           "DATABASE_URL": f"sqlite:///{database}", "PORT": "0"}
    log = tmp_path / "service.log"
    with log.open("w") as out:
        service = subprocess.Popen([sys.executable, str(EXAMPLE)], cwd=tmp_path, env=env,
                                   stdout=out, stderr=subprocess.STDOUT)
    try:
        until(lambda: "serving on" in log.read_text(), "the service serving", 120)
        marker = f"sigterm-{uuid.uuid4().hex}"
        partition, offset = produce_one(kafka_bootstrap, json.dumps({"id": 1, "note": marker}))

        def persisted() -> bool:
            with sqlite3.connect(database) as db:
                return db.execute("SELECT count(*) FROM asset_event WHERE payload LIKE ?",
                                  (f"%{marker}%",)).fetchone()[0] > 0

        until(persisted, "the marker's event persisted", 120)
        service.send_signal(signal.SIGTERM)
        assert service.wait(timeout=60) == 0, log.read_text()
    finally:
        if service.poll() is None:
            service.kill()
            service.wait()
    text = log.read_text()
    assert "stopped" in text and "Traceback" not in text, text
    committed = {tp.partition: tp.offset for tp in committed_partitions(
        kafka_bootstrap, "embedded-service.orders", "orders", partition + 1)}
    assert committed[partition] > offset, (committed, offset)

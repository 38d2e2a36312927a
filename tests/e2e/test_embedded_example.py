"""``examples/embedded_service.py`` run as a user runs it, with a triggerer that fails.

A user copying the example must get what ``sharedstream run`` gives: one ``error:`` line
naming the problem, exit code 1, no traceback. The example's watchers read the fixed
topics ``orders`` and ``orders.dlq``, so they are made on the test broker if absent and
left there (other runs of this test may be using them; no other test reads them). The
database is a SQLite file in a directory that does not exist: the triggerer's start
fails at once, after the topic checks, as with any database that does not answer.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

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

"""Bad input through the real command line: one ``error:`` line naming the problem and
the fix, exit 2 for what the operator must change and 1 for a service that does not
answer (a supervisor may retry), no traceback, no secret, nothing created or lost."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from triggerer import COMMAND, ORDERS, run_cli, write_config

from sharedstream.core.install import pip_install

SECRET = "pa55word-never-shown"


def one_error_line(result: subprocess.CompletedProcess[str], code: int) -> str:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    assert SECRET not in result.stdout + result.stderr
    [line] = [line for line in result.stderr.splitlines() if line]
    assert line.startswith("error: "), line
    return line


def config(tmp_path: Path, *, database_url: str, connection: dict[str, Any],
           **triggerer: Any) -> str:
    return str(write_config(tmp_path / "sharedstream.toml", database_url=database_url,
                            connection=connection, triggerer=triggerer or None))


def with_tables(tmp_path: Path, *, database_url: str, kafka: str,
                tables: dict[str, dict[str, Any]]) -> str:
    return str(write_config(tmp_path / "sharedstream.toml", database_url=database_url,
                            connection={"bootstrap.servers": kafka}, tables=tables))


# The README's destinations, their secrets left to the environment (and not set there).
BILLING = {"destinations.billing": {"kind": "webhook",
                                    "url": "https://billing.example/hooks/sharedstream"}}
PROD = {"airflow.prod": {"base_url": "http://airflow:8080", "username": "sharedstream"},
        "destinations.dags": {"kind": "airflow", "instance": "prod"}}


@pytest.fixture
def topic(create_topic: Callable[..., str]) -> str:
    return create_topic("orders")


CASES: list[tuple[str, Callable[..., tuple[list[str], dict[str, str]]], int, list[str]]] = [
    ("unknown librdkafka key",
     lambda t, kafka, db, topic: (["run", str(ORDERS), "--config", config(
         t, database_url=db, connection={"bootstrap.servers": kafka, "bogus.key": "1"})],
         {"E2E_TOPIC": topic}), 2, ["'e2e'", "bogus.key"]),
    ("broker that does not answer",
     lambda t, kafka, db, topic: (["run", str(ORDERS), "--config", config(
         t, database_url=db, connection={"bootstrap.servers": "127.0.0.1:9",
                                         "sasl.password": SECRET}, broker_timeout=1.0)],
         {"E2E_TOPIC": topic}), 1, ["127.0.0.1:9", "broker_timeout"]),
    ("database URL with another tool's scheme",
     lambda t, kafka, db, topic: (["run", str(ORDERS), "--config", config(
         t, database_url=f"postgres://app:{SECRET}@db/x",
         connection={"bootstrap.servers": kafka})], {"E2E_TOPIC": topic}), 2,
     ["postgresql+psycopg://"]),
    ("database that does not answer",
     lambda t, kafka, db, topic: (["run", str(ORDERS), "--config", config(
         t, database_url=f"postgresql+psycopg://app:{SECRET}@127.0.0.1:9/x",
         connection={"bootstrap.servers": kafka})], {"E2E_TOPIC": topic}), 1,
     ["not reachable", "127.0.0.1:9"]),
    ("a driver that is not installed",
     lambda t, kafka, db, topic: (["events", "list", "--database-url",
                                   f"mysql+mysqldb://app:{SECRET}@db/x"], {}), 2,
     ["MySQLdb", "mysql+pymysql://", pip_install("mysql")]),
    ("schema revision that does not exist",
     lambda t, kafka, db, topic: (["db", "upgrade", "--revision", "9999", "--database-url",
                                   db], {}), 2, ["'9999'", "0005"]),
    ("database without the schema",
     lambda t, kafka, db, topic: (["events", "list", "--database-url", db], {}), 1,
     ["no sharedstream schema", "sharedstream db upgrade"]),
    ("mistyped SQLite path",
     lambda t, kafka, db, topic: (["events", "list", "--database-url",
                                   f"sqlite:///{t / 'typo.db'}"], {}), 2,
     ["not found", "typo.db"]),
    ("webhook destination without its secret",
     lambda t, kafka, db, topic: (["run", str(ORDERS), "--config", with_tables(
         t, database_url=db, kafka=kafka, tables=BILLING)], {"E2E_TOPIC": topic}), 2,
     ["[destinations.billing] secret", "SHAREDSTREAM__DESTINATIONS__BILLING__SECRET"]),
    ("webhook destination without its secret, at check",
     lambda t, kafka, db, topic: (["check", str(ORDERS), "--config", with_tables(
         t, database_url=db, kafka=kafka, tables=BILLING)], {"E2E_TOPIC": topic}), 2,
     ["[destinations.billing] secret", "SHAREDSTREAM__DESTINATIONS__BILLING__SECRET"]),
    ("airflow instance with a username and no password",
     lambda t, kafka, db, topic: (["deliver", "--config", with_tables(
         t, database_url=db, kafka=kafka, tables=PROD)], {}), 2,
     ["[airflow.prod] password", "SHAREDSTREAM__AIRFLOW__PROD__PASSWORD"]),
]


@pytest.mark.parametrize("name, make, code, needles", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_error_line(
        name: str, make: Callable[..., tuple[list[str], dict[str, str]]], code: int,
        needles: list[str], tmp_path: Path, kafka_bootstrap: str, topic: str) -> None:
    database = f"sqlite:///{tmp_path / 'empty.db'}"
    (tmp_path / "empty.db").touch()
    args, env = make(tmp_path, kafka_bootstrap, database, topic)
    line = one_error_line(run_cli(args, cwd=tmp_path, env=env), code)
    for needle in needles:
        assert needle in line, (needle, line)
    assert not (tmp_path / "typo.db").exists()  # reading never creates a database


def test_a_missing_extra_names_it(tmp_path: Path) -> None:
    """``publish-airflow`` without httpx installed (hidden from the process here)."""
    hide = "import sys; sys.modules['httpx'] = None; from sharedstream.cli import main; main()"
    result = subprocess.run([sys.executable, "-c", hide, "publish-airflow", "--instance", "a",
                             "--topic", "t"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=60, check=False)
    line = one_error_line(result, 2)
    assert "'httpx'" in line and pip_install("airflow") in line, line


def test_sigterm_while_starting_is_a_clean_exit(tmp_path: Path) -> None:
    """The config is a FIFO: the process blocks reading it, past its imports and inside
    start-up, which is when the test sends SIGTERM (no sleep: opening the FIFO for writing
    returns only once the process opened it)."""
    fifo = tmp_path / "sharedstream.toml"
    os.mkfifo(fifo)
    process = subprocess.Popen([*COMMAND, "run", str(ORDERS), "--config", str(fifo)],
                               cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    with fifo.open("w"):
        process.send_signal(signal.SIGTERM)
    _out, err = process.communicate(timeout=60)
    assert process.returncode == 0, (process.returncode, err)
    assert "Traceback" not in err

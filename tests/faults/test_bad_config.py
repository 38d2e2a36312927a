"""Every invalid option of the configuration reference: one ``error:`` line, exit 2.

Each names the option, and nothing is touched.

The config points the broker and the PostgreSQL URL at a socket the test
listens on and never answers: a process that reached for either would show up
there as a connection, so "before any connection" is counted, not timed.
``tests/e2e/test_startup.py`` already covers an invalid ``max_in_flight``, an
unknown ``[triggerer]`` key and auto-commit on a connection; these are the rest.
The cases run in parallel (each is a fresh interpreter) to keep the suite short.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from faultkit import Figures
from triggerer import ORDERS, run_cli, toml_value


class Listener:
    """A loopback port that accepts connections, counts them, and says nothing."""

    def __init__(self) -> None:
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.socket.getsockname()[1]
        self.accepted = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.socket.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self.socket.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    made = Listener()
    yield made
    made.close()


def database_url(port: int) -> str:
    return f"postgresql+psycopg://nobody:secret@127.0.0.1:{port}/none"


def connection_toml(port: int) -> str:
    return f'[connections.e2e]\n"bootstrap.servers" = "127.0.0.1:{port}"\n"group.id" = "x"\n'

# (name, TOML section and option, value) -> the error must name the option.
OPTIONS: list[tuple[str, str, object]] = [
    ("subscriber_queue_size", "triggerer", 0),
    ("ack_timeout", "triggerer", 0),
    ("cohort_grace_period", "triggerer", -1),
    ("retry_backoff_initial", "triggerer", -0.5),
    ("retry_backoff_max", "triggerer", 0.01),  # below retry_backoff_initial (1.0)
    ("max_attempts", "triggerer", 0),
    ("shutdown_timeout", "triggerer", 0),
    ("health_port", "triggerer", 70000),
    ("uow_batch_size", "triggerer", 0),
    ("uow_max_delay", "triggerer", -1),
    ("subscriber_queue_size", "triggerer", "many"),
    ("default_retention_days", "state_store", -1),
    ("max_value_storage_bytes", "state_store", 0),
    ("state_cleanup_batch_size", "state_store", -1),
    ("clear_on_success", "state_store", "yes"),
    ("backend", "state_store", ""),
    ("state_backend", "workers", ""),
    ("url", "database", " "),
]


def _config(path: Path, port: int, section: str, option: str, value: object) -> Path:
    database = "" if section == "database" else f"url = {toml_value(database_url(port))}\n"
    body = {"database": database, "triggerer": "", "state_store": "", "workers": ""}
    body[section] += f"{option} = {toml_value(value)}\n"
    path.write_text("".join(f"[{name}]\n{text}\n" for name, text in body.items())
                    + connection_toml(port))
    return path


def test_each_invalid_option_is_one_line_naming_it_exit_2_before_kafka_or_db(
        tmp_path: Path, figures: Figures, listener: Listener) -> None:
    port = listener.port
    cases = [(option, _config(tmp_path / f"case{i}.toml", port, section, option, value))
             for i, (option, section, value) in enumerate(OPTIONS)]
    cases.append(("nonsense", (tmp_path / "section.toml")))
    (tmp_path / "section.toml").write_text(f"[nonsense]\nx = 1\n\n{connection_toml(port)}")
    cases.append(("SHAREDSTREAM_CONN_E2E", tmp_path / "case0.toml"))

    def run(case: tuple[str, Path]) -> tuple[str, int, list[str], float]:
        option, config = case
        env = {"E2E_TOPIC": "t"}
        if option == "SHAREDSTREAM_CONN_E2E":
            env[option] = "{not json"
            config = _config(tmp_path / "conn.toml", port, "triggerer", "ack_timeout", 1)
            config.write_text(config.read_text().replace(connection_toml(port), ""))
        began = time.monotonic()
        result = run_cli(["run", str(ORDERS), "--config", str(config)], cwd=tmp_path,
                         env=env, timeout=60)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        return option, result.returncode, lines, time.monotonic() - began

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(run, cases))
    problems = [f"{option}: exit {code}, stderr {lines}" for option, code, lines, _ in results
                if code != 2 or len(lines) != 1 or not lines[0].startswith("error:")
                or option not in lines[0] or "secret" in lines[0]]
    slowest = max(seconds for *_, seconds in results)
    figures.record("bad configuration (each invalid option)", messages=0, faults=len(cases),
                   lost=0, duplicates=0, recover_seconds=None, cases=len(cases),
                   refused_correctly=len(cases) - len(problems),
                   slowest_refusal_seconds=round(slowest, 1))
    assert problems == []
    assert listener.accepted == 0  # no process reached for the broker or the database

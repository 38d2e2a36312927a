"""``sharedstream run`` as a subprocess: the one way every e2e test starts and stops it.

Each start gets its own log file (stdout and stderr together) in the test's tmp
dir, so a failing test can print exactly what that process said. The health
server listens on port 0 (a free port picked by the process); the port is read
from the process's own start-up line, never guessed, so parallel processes
never collide. Every wait is a condition polled against a deadline, and a
process that exits while we wait fails the wait at once with its log tail.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

WATCHERS = Path(__file__).resolve().parent / "watchers"
ORDERS = WATCHERS / "orders.py"
# The console script without relying on PATH: the interpreter running the tests.
COMMAND = (sys.executable, "-c", "from sharedstream.cli import main; main()")
_HEALTH_LINE = re.compile(r"health and metrics on http://[^:/]+:(\d+)/")


def until(condition: Callable[[], Any], what: str, timeout: float = 60.0,
          interval: float = 0.05, detail: Callable[[], str] | None = None) -> Any:
    """Poll ``condition`` until it returns something truthy; fail naming ``what`` (and
    ``detail()``, read then: a process's log tail)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            more = "" if detail is None else f"; {detail()}"
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}{more}")
        time.sleep(interval)


def toml_value(value: Any) -> str:
    """The TOML text of a str/bool/int/float or a list of them."""
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_config(path: Path, *, database_url: str, connection: Mapping[str, Any],
                 triggerer: Mapping[str, Any] | None = None,
                 connection_id: str = "e2e",
                 tables: Mapping[str, Mapping[str, Any]] | None = None) -> Path:
    """A ``sharedstream.toml`` with fast test defaults (health on a free port, short backoff);
    ``tables`` adds more, e.g. ``{"destinations.hooks": {"kind": "webhook", ...}}``."""
    options: dict[str, Any] = {"health_port": 0, "retry_backoff_initial": 0.1,
                               "retry_backoff_max": 1.0, "shutdown_timeout": 30.0}
    options.update(triggerer or {})
    lines = ["[database]", f"url = {toml_value(database_url)}", "", "[triggerer]"]
    lines += [f"{key} = {toml_value(value)}" for key, value in options.items()]
    lines += ["", f"[connections.{connection_id}]"]
    lines += [f"{toml_value(key)} = {toml_value(value)}" for key, value in connection.items()]
    for name, table in (tables or {}).items():
        lines += ["", f"[{name}]"]
        lines += [f"{key} = {toml_value(value)}" for key, value in table.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def run_cli(args: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: Path,
            timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Run one ``sharedstream`` command to its end (start-up failures, small commands)."""
    return subprocess.run([*COMMAND, *args], cwd=cwd, env={**os.environ, **(env or {})},
                          capture_output=True, text=True, timeout=timeout, check=False)


class Triggerer:
    """One ``sharedstream run WATCHERS --config CONFIG`` process, restartable.

    ``start()`` may be called again after the process ended (crash tests);
    every start writes ``triggerer-<n>.log`` in ``log_dir``.
    """

    def __init__(self, watchers: Path, config: Path, log_dir: Path, *,
                 env: Mapping[str, str] | None = None, args: Sequence[str] = ()) -> None:
        self.watchers = watchers
        self.config = config
        self.log_dir = log_dir
        self.env = dict(env or {})
        self.args = list(args)
        self.starts = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path: Path | None = None
        self._port: int | None = None

    def start(self, *extra_args: str) -> Triggerer:
        if self.running():
            raise RuntimeError("the triggerer is already running")
        self.starts += 1
        self.log_path = self.log_dir / f"triggerer-{self.starts}.log"
        self._port = None
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [*COMMAND, "run", str(self.watchers), "--config", str(self.config),
                 *self.args, *extra_args],
                cwd=self.log_dir, env=env, stdout=log, stderr=subprocess.STDOUT)
        return self

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path else ""

    def _log_tail(self) -> str:
        """This start's last log lines, for a failure's message: what the process was
        doing (a consumer waiting for partitions, a broker error) is all a CI run keeps
        of a failure that does not come back on a second run."""
        return f"log:\n{self.log()[-4000:]}"

    def _alive_or_fail(self, what: str) -> None:
        if not self.running():
            code = self.process.returncode if self.process else None
            raise AssertionError(f"the triggerer exited (code {code}) while waiting for "
                                 f"{what}; {self._log_tail()}")

    def wait_log(self, pattern: str, timeout: float = 60.0) -> re.Match[str]:
        """The first match of ``pattern`` in this start's log, waiting for it to appear."""
        compiled = re.compile(pattern)

        def found() -> re.Match[str] | None:
            match = compiled.search(self.log())
            if match is None:
                self._alive_or_fail(f"log line {pattern!r}")
            return match

        result: re.Match[str] = until(found, f"log line {pattern!r}", timeout,
                                      detail=self._log_tail)
        return result

    @property
    def port(self) -> int:
        if self._port is None:
            self._port = int(self.wait_log(_HEALTH_LINE.pattern).group(1))
        return self._port

    def get(self, path: str) -> tuple[int, str]:
        """``(status, body)`` of a GET on the health server."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}",
                                        timeout=5) as reply:
                return reply.status, reply.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def wait_ready(self, timeout: float = 60.0) -> None:
        def ready() -> bool:
            self._alive_or_fail("/readyz 200")
            return self.get("/readyz")[0] == 200

        until(ready, "/readyz 200", timeout, detail=self._log_tail)

    def signal(self, signum: int = signal.SIGTERM) -> None:
        assert self.process is not None
        self.process.send_signal(signum)

    def wait(self, timeout: float = 60.0) -> int:
        """The exit code, failing if the process is still running after ``timeout``."""
        assert self.process is not None
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the triggerer still runs after {timeout:.0f}s; "
                                 f"{self._log_tail()}") from None

    def kill(self) -> None:
        """``kill -9``: no shutdown at all, as a crash or an OOM kill would."""
        if self.running():
            self.signal(signal.SIGKILL)
        if self.process is not None:
            self.process.wait(30)


def connection_for(kafka_bootstrap: str, prefix: str) -> dict[str, Any]:
    """A test's Kafka connection: its own group.id, and short sessions so a killed member
    leaves the group in seconds."""
    return {"bootstrap.servers": kafka_bootstrap, "group.id": f"{prefix}-{uuid.uuid4().hex[:8]}",
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000}


class Triggerers:
    """Factory of not yet started triggerers, each with its own log dir under ``root``;
    :meth:`kill_all` kills whatever still runs when the test ends, pass or fail."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.made: list[Triggerer] = []

    def __call__(self, config: Path, watchers: Path = ORDERS, *,
                 env: dict[str, str] | None = None, args: tuple[str, ...] = ()) -> Triggerer:
        log_dir = self.root / f"proc{len(self.made)}"
        log_dir.mkdir()
        self.made.append(Triggerer(watchers, config, log_dir, env=env, args=args))
        return self.made[-1]

    def kill_all(self) -> None:
        for process in self.made:
            process.kill()

"""Run a command with the local services up, then take them down.

    scripts/with-services [--no-kafka] [--no-postgres] [--no-mariadb] -- CMD ARGS...

This process starts each service as its own child, exports the variables the
test fixtures read (``KAFKA_BOOTSTRAP_SERVERS``, ``SHAREDSTREAM_KAFKA_STATE``,
``SHAREDSTREAM_TEST_DATABASE_URL``, ``SHAREDSTREAM_TEST_MARIADB_URL``), runs
CMD, stops the services whatever CMD did, and exits with CMD's status.

Why a supervising process rather than ``kafka-local start`` in a shell: it
stays the parent of the services, so they are reaped (no ``<defunct>``
entries on machines whose PID 1 does not reap orphans), and it registers as
a child subreaper, so a broker that a test restarted (a child of pytest,
orphaned when pytest exits) is re-parented here and reaped too. The services
are bound to this process: if it is killed outright, their watchdogs kill them.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType

from .kafka import KafkaBroker
from .mariadb import MariaDBServer
from .postgres import PostgresServer

PR_SET_CHILD_SUBREAPER = 36
PR_SET_PDEATHSIG = 1


def _become_subreaper() -> None:
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _die_with_parent() -> None:
    """In the command's child: SIGTERM it if this runner dies (e.g. SIGKILL).

    Safe here because the runner is single-threaded, so the parent-death
    signal cannot fire early on a mere thread exit.
    """
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def _reap() -> None:
    """Collect every exited child (including adopted orphans) without blocking."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _phase(name: str, began: float) -> None:
    print(f"[with-services] {name}: {time.monotonic() - began:.1f}s", file=sys.stderr,
          flush=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="with-services")
    parser.add_argument("--no-kafka", action="store_true")
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--no-mariadb", action="store_true")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given (put it after --)")

    _become_subreaper()
    child: subprocess.Popen[bytes] | None = None
    received: list[int] = []

    def _forward(signum: int, _frame: FrameType | None) -> None:
        """SIGTERM/SIGHUP: pass on to the command, then tear down and exit.

        SIGINT is only noted: from a terminal the command got it too, and a
        second one would cut pytest's own teardown short. Installing a handler
        (rather than inheriting SIG_IGN from a shell's background job) also
        gives the command a default SIGINT, so Ctrl-C still reaches pytest.
        """
        received.append(signum)
        if child is None:
            raise SystemExit(128 + signum)
        if signum != signal.SIGINT and child.poll() is None:
            child.send_signal(signal.SIGTERM)

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _forward)

    scratch = Path(tempfile.mkdtemp(prefix="sharedstream-services-"))
    env = dict(os.environ)
    services: list[KafkaBroker | PostgresServer | MariaDBServer] = []
    kafka_state = scratch / "kafka.json"
    try:
        if not args.no_kafka:
            began = time.monotonic()
            broker = KafkaBroker(state_file=kafka_state)
            services.append(broker)
            broker.start()
            env["KAFKA_BOOTSTRAP_SERVERS"] = broker.bootstrap
            env["SHAREDSTREAM_KAFKA_STATE"] = str(kafka_state)
            _phase(f"kafka {broker.bootstrap} up", began)
        if not args.no_postgres:
            began = time.monotonic()
            postgres = PostgresServer()
            services.append(postgres)
            postgres.start()
            env["SHAREDSTREAM_TEST_DATABASE_URL"] = postgres.create_database()
            _phase(f"postgresql 127.0.0.1:{postgres.port} up", began)
        if not args.no_mariadb:
            began = time.monotonic()
            mariadb = MariaDBServer()
            services.append(mariadb)
            mariadb.start()
            env["SHAREDSTREAM_TEST_MARIADB_URL"] = mariadb.create_database()
            _phase(f"mariadb 127.0.0.1:{mariadb.port} up", began)

        began = time.monotonic()
        child = subprocess.Popen(command, env=env, preexec_fn=_die_with_parent)
        code = child.wait()
        _phase(f"{' '.join(command)} (exit {code})", began)
        terminated = [s for s in received if s != signal.SIGINT]
        return 128 + terminated[0] if terminated and code == 0 else code
    finally:
        began = time.monotonic()
        for service in reversed(services):
            if isinstance(service, KafkaBroker) and kafka_state.exists():
                # A test may have restarted the broker (a new process, recorded
                # in the state file): stop ours if still up, then the current one.
                service.process.stop()
                service = KafkaBroker.from_state(kafka_state)
            service.stop()
        _reap()
        with contextlib.suppress(OSError):
            scratch.rmdir()
        _phase("services stopped", began)

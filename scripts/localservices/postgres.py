"""A real PostgreSQL server for tests, from the OS packages, without Docker.

initdb and postgres refuse to run as root, so as root both run as the
``postgres`` account (created when missing) on a data directory it owns under
a temporary directory. The server listens on a free 127.0.0.1 port (and a
private Unix socket directory, never the system one), trusts loopback
connections (a throwaway test cluster, nothing to protect), and runs with
``fsync=off``: the tests crash clients, never the machine, and this halves
the time of commit-heavy tests. Each ``create_database()`` call gives a fresh
database, so one server serves a whole test run.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
import uuid
from pathlib import Path

import psycopg
from psycopg import sql

from ._process import (
    ManagedProcess,
    ServiceError,
    apt_install,
    chown_tree,
    free_port,
    run_checked,
    service_user,
    wait_until,
)

SUPERUSER = "postgres"


def find_bindir() -> Path | None:
    """PostgreSQL's server binaries: ``$PG_BINDIR``, the newest Debian
    ``/usr/lib/postgresql/<major>/bin``, or wherever ``initdb`` on PATH points."""
    explicit = os.environ.get("PG_BINDIR")
    if explicit:
        return Path(explicit)
    majors = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
        reverse=True,
    )
    if majors:
        return majors[0].parent
    initdb = shutil.which("initdb")
    return Path(initdb).resolve().parent if initdb else None


def ensure_installed() -> Path:
    """The bin dir, installing the ``postgresql`` package first when needed."""
    bindir = find_bindir()
    if bindir is None:
        apt_install(["postgresql"])
        bindir = find_bindir()
    if bindir is None or not (bindir / "postgres").exists():
        raise ServiceError("PostgreSQL server binaries not found (looked in $PG_BINDIR, "
                           "/usr/lib/postgresql/*/bin and PATH)")
    return bindir


class PostgresServer:
    """One throwaway PostgreSQL cluster on 127.0.0.1.

    ``owner_pid`` as for ``KafkaBroker``: None = this process, 0 = detached.
    """

    def __init__(self, workdir: Path | None = None, *, port: int | None = None,
                 owner_pid: int | None = None, cleanup: bool | None = None) -> None:
        self._own_workdir = workdir is None
        self.workdir = Path(tempfile.mkdtemp(prefix="sharedstream-pg-")) if workdir is None \
            else workdir
        self.cleanup = self._own_workdir if cleanup is None else cleanup
        self.port = port or free_port()
        self.datadir = self.workdir / "data"
        self.sockdir = self.workdir / "run"
        self.process = ManagedProcess(
            "postgres", self.workdir / "postgres.log",
            owner_pid=os.getpid() if owner_pid is None else (owner_pid or None),
            # SIGINT is PostgreSQL's "fast" shutdown: roll back sessions and
            # exit; SIGTERM ("smart") would wait for every client to leave.
            stop_signal=signal.SIGINT, stop_timeout=30.0,
        )
        self.start_seconds: float | None = None

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def _dsn(self, database: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} user={SUPERUSER} dbname={database}"

    def start(self, timeout: float = 60.0) -> None:
        began = time.monotonic()
        bindir = ensure_installed()
        user = service_user("postgres")
        self.workdir.mkdir(parents=True, exist_ok=True)
        # The server account must be able to reach its data dir through ours.
        self.workdir.chmod(0o755)
        self.sockdir.mkdir(exist_ok=True)
        chown_tree(self.sockdir, user)
        if not (self.datadir / "PG_VERSION").exists():
            self.datadir.mkdir(mode=0o700, exist_ok=True)
            chown_tree(self.datadir, user)
            run_checked([str(bindir / "initdb"), "-D", str(self.datadir), "-U", SUPERUSER,
                         "--auth=trust", "--encoding=UTF8", "--no-locale", "--no-sync"],
                        user=user)
        self.process.spawn(
            [str(bindir / "postgres"), "-D", str(self.datadir), "-p", str(self.port),
             "-k", str(self.sockdir), "-c", "listen_addresses=127.0.0.1",
             "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
             "-c", "max_connections=300"],
            user=user,
        )
        wait_until(self.answers, timeout=timeout, what=f"PostgreSQL on port {self.port}",
                   alive=self.process.running, log_path=self.process.log_path)
        self.start_seconds = time.monotonic() - began

    def answers(self) -> bool:
        try:
            with psycopg.connect(self._dsn(), connect_timeout=2):
                return True
        except psycopg.OperationalError:
            return False

    def create_database(self, prefix: str = "sharedstream_test") -> str:
        """Create a fresh, empty database and return its SQLAlchemy URL."""
        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self._dsn(), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.url(name)

    def stop(self) -> None:
        self.process.stop()
        if self.cleanup:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def running(self) -> bool:
        return self.process.running()

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
import pwd
import shutil
import signal
from pathlib import Path

import psycopg
from psycopg import sql

from ._dbserver import DatabaseServer
from ._process import ServiceError, apt_install, run_checked

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


class PostgresServer(DatabaseServer):
    """One throwaway PostgreSQL cluster on 127.0.0.1."""

    name = "postgres"
    account = "postgres"
    # SIGINT is PostgreSQL's "fast" shutdown: roll back sessions and exit; SIGTERM
    # ("smart") would wait for every client to leave.
    stop_signal = signal.SIGINT

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def _dsn(self, database: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} user={SUPERUSER} dbname={database}"

    def _install(self) -> None:
        self._bindir = ensure_installed()

    def _initialised(self) -> bool:
        return (self.datadir / "PG_VERSION").exists()

    def _initialise(self, user: pwd.struct_passwd | None) -> None:
        run_checked([str(self._bindir / "initdb"), "-D", str(self.datadir), "-U", SUPERUSER,
                     "--auth=trust", "--encoding=UTF8", "--no-locale", "--no-sync"], user=user)

    def _argv(self) -> list[str]:
        return [str(self._bindir / "postgres"), "-D", str(self.datadir), "-p", str(self.port),
                "-k", str(self.sockdir), "-c", "listen_addresses=127.0.0.1",
                "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
                "-c", "max_connections=300"]

    def answers(self) -> bool:
        try:
            with psycopg.connect(self._dsn(), connect_timeout=2):
                return True
        except psycopg.OperationalError:
            return False

    def _create(self, database: str) -> None:
        with psycopg.connect(self._dsn(), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))

"""A real MariaDB server for tests, from the OS packages, without Docker.

``mariadb-install-db`` creates a private data directory (owned by the
``mysql`` account when we are root: mariadbd will not run as root without
being told to), and ``mariadbd`` serves it on a free 127.0.0.1 port and a
private socket, with ``--no-defaults`` so the machine's ``/etc/mysql``
configuration never leaks in. Root gets no password on the private socket,
which we use once to create a password-protected user and a throwaway
database the tests reach over TCP with PyMySQL.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
import uuid
from pathlib import Path

import pymysql

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

TEST_USER = "sharedstream"
TEST_PASSWORD = "sharedstream-test"


def _binaries() -> tuple[str, str] | None:
    server = shutil.which("mariadbd") or shutil.which("mariadbd", path="/usr/sbin:/usr/bin")
    installer = shutil.which("mariadb-install-db")
    return (server, installer) if server and installer else None


def ensure_installed() -> tuple[str, str]:
    """``(mariadbd, mariadb-install-db)``, installing ``mariadb-server`` when needed."""
    found = _binaries()
    if found is None:
        apt_install(["mariadb-server"])
        found = _binaries()
    if found is None:
        raise ServiceError("MariaDB binaries (mariadbd, mariadb-install-db) not found")
    return found


class MariaDBServer:
    """One throwaway MariaDB server on 127.0.0.1.

    ``owner_pid`` as for ``KafkaBroker``: None = this process, 0 = detached.
    """

    def __init__(self, workdir: Path | None = None, *, port: int | None = None,
                 owner_pid: int | None = None, cleanup: bool | None = None) -> None:
        self._own_workdir = workdir is None
        self.workdir = Path(tempfile.mkdtemp(prefix="sharedstream-mariadb-")) \
            if workdir is None else workdir
        self.cleanup = self._own_workdir if cleanup is None else cleanup
        self.port = port or free_port()
        self.datadir = self.workdir / "data"
        self.sockdir = self.workdir / "run"
        self.socket = self.sockdir / "mariadbd.sock"
        self.process = ManagedProcess(
            "mariadb", self.workdir / "mariadb.log",
            owner_pid=os.getpid() if owner_pid is None else (owner_pid or None),
            stop_signal=signal.SIGTERM, stop_timeout=30.0,
        )
        self.start_seconds: float | None = None

    def start(self, timeout: float = 60.0) -> None:
        began = time.monotonic()
        server, installer = ensure_installed()
        user = service_user("mysql")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.workdir.chmod(0o755)
        self.sockdir.mkdir(exist_ok=True)
        chown_tree(self.sockdir, user)
        if not (self.datadir / "mysql").exists():
            self.datadir.mkdir(mode=0o700, exist_ok=True)
            chown_tree(self.datadir, user)
            run_checked([installer, "--no-defaults", f"--datadir={self.datadir}",
                         "--auth-root-authentication-method=normal", "--skip-test-db"],
                        user=user)
        self.process.spawn(
            [server, "--no-defaults", f"--datadir={self.datadir}", f"--port={self.port}",
             "--bind-address=127.0.0.1", f"--socket={self.socket}",
             f"--pid-file={self.sockdir / 'mariadbd.pid'}", "--skip-name-resolve",
             "--innodb-flush-log-at-trx-commit=2", "--innodb-buffer-pool-size=128M",
             "--max-connections=300", "--character-set-server=utf8mb4",
             "--collation-server=utf8mb4_unicode_ci"],
            user=user,
        )
        wait_until(self.answers, timeout=timeout, what=f"MariaDB on port {self.port}",
                   alive=self.process.running, log_path=self.process.log_path)
        with self._root() as conn, conn.cursor() as cur:
            cur.execute(f"CREATE USER IF NOT EXISTS '{TEST_USER}'@'127.0.0.1' "
                        f"IDENTIFIED BY '{TEST_PASSWORD}'")
            cur.execute(f"GRANT ALL PRIVILEGES ON *.* TO '{TEST_USER}'@'127.0.0.1'")
        self.start_seconds = time.monotonic() - began

    def _root(self) -> pymysql.connections.Connection:
        return pymysql.connect(unix_socket=str(self.socket), user="root", password="",
                               connect_timeout=2, autocommit=True)

    def answers(self) -> bool:
        try:
            self._root().close()
        except pymysql.err.OperationalError:
            return False
        return True

    def url(self, database: str) -> str:
        return (f"mysql+pymysql://{TEST_USER}:{TEST_PASSWORD}@127.0.0.1:{self.port}/"
                f"{database}?charset=utf8mb4")

    def create_database(self, prefix: str = "sharedstream_test") -> str:
        """Create a fresh, empty database and return its SQLAlchemy URL."""
        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        with self._root() as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
        return self.url(name)

    def stop(self) -> None:
        self.process.stop()
        if self.cleanup:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def running(self) -> bool:
        return self.process.running()

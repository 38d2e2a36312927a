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

import pwd
import shutil

import pymysql

from ._dbserver import DatabaseServer
from ._process import ServiceError, apt_install, run_checked

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


class MariaDBServer(DatabaseServer):
    """One throwaway MariaDB server on 127.0.0.1."""

    name = "mariadb"
    account = "mysql"

    @property
    def socket(self) -> str:
        return str(self.sockdir / "mariadbd.sock")

    def _install(self) -> None:
        self._server, self._installer = ensure_installed()

    def _initialised(self) -> bool:
        return (self.datadir / "mysql").exists()

    def _initialise(self, user: pwd.struct_passwd | None) -> None:
        run_checked([self._installer, "--no-defaults", f"--datadir={self.datadir}",
                     "--auth-root-authentication-method=normal", "--skip-test-db"], user=user)

    def _argv(self) -> list[str]:
        return [self._server, "--no-defaults", f"--datadir={self.datadir}",
                f"--port={self.port}", "--bind-address=127.0.0.1", f"--socket={self.socket}",
                f"--pid-file={self.sockdir / 'mariadbd.pid'}", "--skip-name-resolve",
                "--innodb-flush-log-at-trx-commit=2", "--innodb-buffer-pool-size=128M",
                "--max-connections=300", "--character-set-server=utf8mb4",
                "--collation-server=utf8mb4_unicode_ci"]

    def _after_start(self) -> None:
        with self._root() as conn, conn.cursor() as cur:
            cur.execute(f"CREATE USER IF NOT EXISTS '{TEST_USER}'@'127.0.0.1' "
                        f"IDENTIFIED BY '{TEST_PASSWORD}'")
            cur.execute(f"GRANT ALL PRIVILEGES ON *.* TO '{TEST_USER}'@'127.0.0.1'")

    def _root(self) -> pymysql.connections.Connection:
        return pymysql.connect(unix_socket=self.socket, user="root", password="",
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

    def _create(self, database: str) -> None:
        with self._root() as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{database}` CHARACTER SET utf8mb4")

"""The life cycle both throwaway database servers share (PostgreSQL, MariaDB).

A server owns a work directory (data + a private socket directory), runs as the
database's own system account when we are root, listens on a free 127.0.0.1 port,
and gives each ``create_database()`` call a fresh database. The subclasses say
only what differs: how to install, initialise and run the server binary, and how
to talk to it.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import tempfile
import time
import uuid
from pathlib import Path

from ._process import ManagedProcess, chown_tree, free_port, service_user, wait_until


class DatabaseServer:
    """One throwaway database server on 127.0.0.1.

    ``owner_pid`` as for ``KafkaBroker``: None = this process, 0 = detached.
    """

    name = "database"  # the log file's and the process's name
    account = "root"  # the system account the server runs as when we are root
    stop_signal = signal.SIGTERM

    def __init__(self, workdir: Path | None = None, *, port: int | None = None,
                 owner_pid: int | None = None, cleanup: bool | None = None) -> None:
        own_workdir = workdir is None
        self.workdir = Path(tempfile.mkdtemp(prefix=f"sharedstream-{self.name}-")) \
            if workdir is None else workdir
        self.cleanup = own_workdir if cleanup is None else cleanup
        self.port = port or free_port()
        self.datadir = self.workdir / "data"
        self.sockdir = self.workdir / "run"
        self.process = ManagedProcess(
            self.name, self.workdir / f"{self.name}.log",
            owner_pid=os.getpid() if owner_pid is None else (owner_pid or None),
            stop_signal=self.stop_signal, stop_timeout=30.0,
        )
        self.start_seconds: float | None = None

    # -- what each server says -----------------------------------------------------------

    def _install(self) -> None:
        """Find (or install) the binaries; raise ServiceError when they are missing."""
        raise NotImplementedError

    def _initialised(self) -> bool:
        raise NotImplementedError

    def _initialise(self, user: pwd.struct_passwd | None) -> None:
        raise NotImplementedError

    def _argv(self) -> list[str]:
        raise NotImplementedError

    def _after_start(self) -> None:
        """Anything to set up once the server answers (users, grants)."""

    def answers(self) -> bool:
        raise NotImplementedError

    def url(self, database: str) -> str:
        raise NotImplementedError

    def _create(self, database: str) -> None:
        raise NotImplementedError

    # -- the shared life cycle -----------------------------------------------------------

    def start(self, timeout: float = 60.0) -> None:
        began = time.monotonic()
        self._install()
        user = service_user(self.account)
        self.workdir.mkdir(parents=True, exist_ok=True)
        # The server account must be able to reach its data dir through ours.
        self.workdir.chmod(0o755)
        self.sockdir.mkdir(exist_ok=True)
        chown_tree(self.sockdir, user)
        if not self._initialised():
            self.datadir.mkdir(mode=0o700, exist_ok=True)
            chown_tree(self.datadir, user)
            self._initialise(user)
        self.process.spawn(self._argv(), user=user)
        wait_until(self.answers, timeout=timeout, what=f"{self.name} on port {self.port}",
                   alive=self.process.running, log_path=self.process.log_path)
        self._after_start()
        self.start_seconds = time.monotonic() - began

    def create_database(self, prefix: str = "sharedstream_test") -> str:
        """Create a fresh, empty database and return its SQLAlchemy URL."""
        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        self._create(name)
        return self.url(name)

    def stop(self) -> None:
        self.process.stop()
        if self.cleanup:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def running(self) -> bool:
        return self.process.running()

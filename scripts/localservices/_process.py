"""Process plumbing shared by the local services: ports, users, start, stop.

Every service runs as the leader of its own process group (``setsid``) so a
stop can signal the whole tree (PostgreSQL's backends, the JVM's helpers) and
so the terminal's Ctrl-C reaches only the test runner, which then stops the
services in order. Each started service gets a watchdog (``_watchdog.py``)
bound to an *owner* PID: when the owner disappears without stopping the
service (SIGKILL, segfault), the watchdog kills the group. ``atexit`` covers
the ordinary interpreter exit of an owner that forgot to call ``stop()``.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

WATCHDOG = Path(__file__).with_name("_watchdog.py")


class ServiceError(RuntimeError):
    """A local service could not be installed, started or reached."""


def free_port() -> int:
    """Ask the kernel for a free loopback TCP port.

    Failure window: the port is released before the service binds it, so
    another process may take it in between; the service then fails to start
    with "address already in use" and the error shows the log tail.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def pid_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            state = stat.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def service_user(name: str) -> pwd.struct_passwd | None:
    """The OS account a database server must run as, or None to run as ourselves.

    PostgreSQL's initdb and postmaster refuse to run as root, and mariadbd
    wants a non-root user too; when we are not root we simply run as ourselves.
    As root, the account is created (system user, no login) when missing.
    """
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    useradd = shutil.which("useradd") or "/usr/sbin/useradd"
    subprocess.run(
        [useradd, "--system", "--user-group", "--no-create-home", "--shell", "/usr/sbin/nologin",
         name],
        check=True,
    )
    return pwd.getpwnam(name)


def chown_tree(path: Path, user: pwd.struct_passwd | None) -> None:
    """Give ``path`` and everything below it to ``user`` (no-op when None)."""
    if user is None:
        return
    for root, dirs, files in os.walk(path):
        for entry in [root, *(os.path.join(root, d) for d in dirs),
                      *(os.path.join(root, f) for f in files)]:
            os.chown(entry, user.pw_uid, user.pw_gid)


def cached_build(home: Path, scratch_prefix: str, build: Callable[[Path], str]) -> None:
    """Run ``build(scratch)`` once per cache: ``home/.complete`` marks it done.

    Concurrent callers (two test sessions) serialise on ``home/.lock``, and the second
    finds the stamp. ``build`` works in a scratch directory under ``home`` (removed
    afterwards, built or not), moves what it made into place and returns the stamp's
    text, written last: a build interrupted mid-way never leaves a cache that looks
    whole, and the next call builds again. A killed build cannot remove its scratch
    directory; under the lock no other build runs, so the next one removes it.
    """
    stamp = home / ".complete"
    if stamp.exists():
        return
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists():
            return
        for stale in home.glob(f"{scratch_prefix}*"):
            shutil.rmtree(stale, ignore_errors=True)
        scratch = Path(tempfile.mkdtemp(prefix=scratch_prefix, dir=home))
        try:
            stamp.write_text(build(scratch))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


def maven(purpose: str) -> str:
    """The ``mvn`` on PATH; a ServiceError saying how to install it, naming ``purpose``."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ServiceError(f"Maven (mvn) is needed to {purpose}; "
                           "install it (apt-get install -y maven)")
    return mvn


def run_checked(argv: Sequence[str], *, user: pwd.struct_passwd | None = None,
                env: Mapping[str, str] | None = None, timeout: float = 120.0) -> str:
    """Run a short-lived helper (initdb, StorageTool, ...) and return its output.

    Raises ServiceError with the command's combined output when it fails, so
    the reason is in the test report rather than lost in a pipe.
    """
    proc = subprocess.run(
        list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        timeout=timeout, env=dict(env) if env is not None else None,
        user=user.pw_uid if user else None, group=user.pw_gid if user else None,
        extra_groups=[] if user else None, cwd="/",
    )
    if proc.returncode != 0:
        raise ServiceError(f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stdout}")
    return proc.stdout


def apt_install(packages: Sequence[str]) -> None:
    """Install Debian packages, without letting their maintainer scripts start daemons.

    The postgresql and mariadb-server packages start a system-wide server on
    their default ports from ``postinst`` when nothing forbids it; the tests
    never use those, so a temporary ``policy-rc.d`` answering 101 ("action
    forbidden") keeps them from running at all, as Debian's container images do.
    """
    apt = shutil.which("apt-get")
    if os.geteuid() != 0 or apt is None:
        raise ServiceError(f"missing OS packages {' '.join(packages)}: install them "
                           "(as root on Debian/Ubuntu: apt-get install -y ...)")
    policy = Path("/usr/sbin/policy-rc.d")
    placed = not policy.exists()
    if placed:
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        run_checked([apt, "update"], env=env, timeout=600)
        run_checked([apt, "install", "-y", *packages], env=env, timeout=1200)
    finally:
        if placed:
            policy.unlink()


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log written)"


class ManagedProcess:
    """One long-running server process in its own group, with a watchdog.

    ``owner_pid`` is the process whose death must take the server down: the
    test runner by default, or the shell of ``scripts/test`` when started
    through the CLI. ``owner_pid=None`` means the server outlives its starter
    (``scripts/kafka-local start`` without ``--owner-pid``) and is stopped only
    through its state file.
    """

    def __init__(self, name: str, log_path: Path, *, owner_pid: int | None,
                 stop_signal: signal.Signals = signal.SIGTERM, stop_timeout: float = 30.0) -> None:
        self.name = name
        self.log_path = log_path
        self.owner_pid = owner_pid
        self.stop_signal = stop_signal
        self.stop_timeout = stop_timeout
        self.pid: int | None = None
        self._popen: subprocess.Popen[bytes] | None = None
        self._watchdog: subprocess.Popen[bytes] | None = None
        self._atexit_registered = False

    def spawn(self, argv: Sequence[str], *, user: pwd.struct_passwd | None = None,
              env: Mapping[str, str] | None = None) -> None:
        if self.pid is not None and pid_alive(self.pid):
            raise ServiceError(f"{self.name} is already running (pid {self.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self._popen = subprocess.Popen(
                list(argv), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, env=dict(env) if env is not None else None,
                user=user.pw_uid if user else None, group=user.pw_gid if user else None,
                extra_groups=[] if user else None, cwd="/",
            )
        self.pid = self._popen.pid
        if self.owner_pid is not None:
            self._watchdog = subprocess.Popen(
                [sys.executable, str(WATCHDOG), str(self.owner_pid), str(self.pid),
                 str(self.stop_timeout)],
                stdin=subprocess.DEVNULL, start_new_session=True,
            )
        if not self._atexit_registered and self.owner_pid == os.getpid():
            atexit.register(self.stop)
            self._atexit_registered = True

    def adopt(self, pid: int) -> None:
        """Manage a server started by another process (the CLI's state file)."""
        self.pid = pid
        self._popen = None

    def running(self) -> bool:
        if self.pid is None:
            return False
        if self._popen is not None:
            return self._popen.poll() is None
        return pid_alive(self.pid)

    def exited_code(self) -> int | None:
        """Exit status if the server already died (only known for our own child)."""
        return self._popen.poll() if self._popen is not None else None

    def stop(self) -> None:
        """Graceful signal to the group, then SIGKILL after ``stop_timeout``."""
        pid = self.pid
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, self.stop_signal)
        if not self._wait_gone(pid, self.stop_timeout):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            self._wait_gone(pid, 10.0)
        # Stragglers of the group (e.g. a backend) outliving the leader.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        self.pid = None
        self._popen = None
        if self._watchdog is not None:
            # The service is gone, so the watchdog is exiting on its own.
            try:
                self._watchdog.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._watchdog.kill()
                self._watchdog.wait()
            self._watchdog = None

    def _wait_gone(self, pid: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._popen is not None:
                if self._popen.poll() is not None:
                    return True
            elif not pid_alive(pid):
                return True
            time.sleep(0.05)
        return False


def wait_until(condition: Callable[[], bool], *, timeout: float, what: str,
               alive: Callable[[], bool], log_path: Path, interval: float = 0.2) -> None:
    """Poll ``condition`` until it holds, the server dies, or the deadline passes."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return
        if not alive():
            raise ServiceError(f"{what}: the server exited during start-up; log tail:\n"
                               f"{log_tail(log_path)}")
        if time.monotonic() > deadline:
            raise ServiceError(f"{what}: not ready after {timeout:.0f}s; log tail:\n"
                               f"{log_tail(log_path)}")
        time.sleep(interval)

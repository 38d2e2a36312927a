"""Kill a service's process group when the process that owns it disappears.

Run as a standalone script (no package imports) by ``localservices._process``:

    python _watchdog.py OWNER_PID SERVICE_PID GRACE_SECONDS

Why a separate process: ``atexit`` handlers and ``finally`` blocks do not run
when the owner (pytest, ``scripts/test``) is killed with SIGKILL or crashes in C
code, and ``PR_SET_PDEATHSIG`` fires when the *thread* that forked dies, not the
process, and is cleared when a child changes user (PostgreSQL, MariaDB). This
watchdog sits in its own session, waits on pidfds of both processes (no polling
when pidfds are available), and when the owner goes away first it sends SIGTERM
to the service's process group, then SIGKILL after GRACE_SECONDS. When the
service goes away first (normal stop) it simply exits.

Failure window: if the watchdog itself is SIGKILLed and the owner then dies
without running its cleanup, the service survives; ``scripts/*-local stop``
and the state files under ``.services/`` exist for that case.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time


def _alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie waiting to be reaped."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            state = stat.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def _wait_first(owner: int, service: int) -> str:
    """Block until the owner or the service exits; return which one did."""
    try:
        fds = {os.pidfd_open(owner): "owner", os.pidfd_open(service): "service"}
    except (OSError, AttributeError):
        fds = {}
    if fds:
        while True:
            ready, _, _ = select.select(list(fds), [], [], 5.0)
            # A pidfd becomes readable when its process terminates (zombies
            # included); double-check with /proc in case of a spurious wake-up.
            for fd in ready:
                who = fds[fd]
                if not _alive(owner if who == "owner" else service):
                    return who
            if not _alive(service):
                return "service"
            if not _alive(owner):
                return "owner"
    while True:
        if not _alive(service):
            return "service"
        if not _alive(owner):
            return "owner"
        time.sleep(0.5)


def _kill_group(pgid: int, grace: float) -> None:
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not _alive(pgid):
            break
        time.sleep(0.1)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return


def main(argv: list[str]) -> int:
    owner, service, grace = int(argv[1]), int(argv[2]), float(argv[3])
    # Stay alive through the terminal's Ctrl-C and the owner's hang-up: this
    # process exists precisely to outlive the owner.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    if _wait_first(owner, service) == "owner":
        _kill_group(service, grace)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

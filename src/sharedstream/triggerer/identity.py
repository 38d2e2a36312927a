"""This process's identity for static group membership: one ``group.instance.id`` per
consumer group, so a process restarted after a crash takes its partitions back at once
(``sharedstream.kafka.membership`` says why and how the consumer uses it).

* ``[triggerer] instance_name`` set: that name, for every group. The Helm chart sets it
  to the pod's name. Two live processes given one name in one group: the broker fences
  the older, which stops with an ``error:`` line naming this setting.
* Unset (the default): ``<host name>-<slot>``, per consumer group the lowest slot no
  other live sharedstream process on this host holds for that group. A slot is held by
  an exclusive ``flock`` on ``<temp dir>/sharedstream-instances/<group digest>.<slot>``;
  the kernel drops the lock when its process dies, kill -9 included, so a process
  started again on the host takes the slot the dead one left, hence its id and its
  partitions. Processes of one module scaled out on one host take 0, 1, 2, ...
* ``static_membership = false``: no id; each start joins afresh, and after a crash
  waits for the dead member's session to time out (``session.timeout.ms``).

Failure windows: a host whose temporary directory cannot be written takes slot 0
unlocked (a warning says so): a second process of the same group there takes the same
id and is fenced. Two hosts with one host name (containers sharing the host's network
namespace) derive the same ids: give each an ``instance_name``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import re
import socket
import tempfile
from collections.abc import Iterable
from pathlib import Path

from sharedstream.kafka.membership import StaticMembership
from sharedstream.triggerer.config import ProcessSettings

log = logging.getLogger(__name__)

LOCK_DIR = "sharedstream-instances"
MAX_SLOTS = 1024
# Kafka's rule for a group.instance.id: at most 249 of these characters.
_ILLEGAL = re.compile(r"[^A-Za-z0-9._-]")


class Identity:
    """The ids claimed, and the slot locks that keep them this process's until
    :meth:`release` (or its exit)."""

    def __init__(self, membership: StaticMembership | None, locks: list[int]) -> None:
        self.membership = membership
        self._locks = locks

    def release(self) -> None:
        for fd in self._locks:
            os.close(fd)  # closing the descriptor drops its flock
        self._locks = []


def claim_identity(settings: ProcessSettings, consumer_groups: Iterable[str], *,
                   lock_dir: Path | None = None, host: str | None = None) -> Identity:
    """Each consumer group's ``group.instance.id`` (see the module doc)."""
    groups = sorted(set(consumer_groups))
    if not settings.static_membership or not groups:
        return Identity(None, [])
    leave = settings.leave_group_on_shutdown
    if settings.instance_name:
        return Identity(StaticMembership({g: settings.instance_name for g in groups},
                                         "[triggerer] instance_name", leave), [])
    name = _ILLEGAL.sub("-", host if host is not None else socket.gethostname())[:200]
    directory = lock_dir if lock_dir is not None else Path(tempfile.gettempdir()) / LOCK_DIR
    ids: dict[str, str] = {}
    locks: list[int] = []
    for group in groups:
        slot, fd = _claim_slot(directory, group)
        if fd is not None:
            locks.append(fd)
        ids[group] = f"{name}-{slot}"
    return Identity(StaticMembership(
        ids, "the host name and a slot", leave), locks)


def _claim_slot(directory: Path, group: str) -> tuple[int, int | None]:
    """The lowest slot of ``group`` free on this host, and the descriptor locking it."""
    digest = hashlib.sha256(group.encode()).hexdigest()[:20]
    try:
        directory.mkdir(mode=0o1777, exist_ok=True)
        with contextlib.suppress(OSError):  # another user made it: theirs to keep open
            directory.chmod(0o1777)
    except OSError as exc:
        log.warning("group %s: no slot lock in %s (%s): using slot 0 unlocked, so a second "
                    "process of this group on this host would take the same "
                    "group.instance.id", group, directory, exc.strerror or exc)
        return 0, None
    for slot in range(MAX_SLOTS):
        path = directory / f"{digest}.{slot}"
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)
        except OSError:
            continue  # not ours to open: leave the slot to its owner
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        return slot, fd
    raise RuntimeError(f"group {group}: {MAX_SLOTS} processes of it on this host already")

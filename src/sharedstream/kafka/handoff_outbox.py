"""The hand-off's outbox: what the event loop asks of the consumer thread.

Named from the loop's side (it is the loop's outbox): the commit targets the ledger
published, per-partition fetch requests (pause at a bound, or seek back and resume),
the group's pause, a request to look at the topic ids now, and commands run on the
thread with the consumer (the adapter's ``commit()``, for tests and the bench).

Thread-safety:

* Writers: the event loop (every ``publish``/``request``/``pause``/``command``), and the
  consumer thread only to put back a fetch request it could not apply yet
  (:meth:`Outbox.retry_fetch`). Reader: the consumer thread alone, once per turn
  (the ``take_*`` methods swap the pending requests out whole).
* ``_lock`` guards the published targets, the fetch requests, the group's pause and
  the id check. A take peeks without it first: a request put just after is taken next
  turn. Commands travel on their own queue (``queue.SimpleQueue``, thread-safe).
* The group's pause here is the *request*; what is paused, and why, is decided on the
  thread (core/backpressure.py) and published in the status (kafka/handoff_status.py).
* A loop dying between two requests leaves each one whole (one assignment under the
  lock). A thread dying with requests pending leaves them unread: the commands are
  failed (:meth:`Outbox.fail_commands`), the rest dies with the consumer (its
  partitions go to the next owner from the last confirmed commit).
"""

from __future__ import annotations

import concurrent.futures
import queue
import threading
from collections.abc import Callable, Mapping
from typing import Any

from sharedstream.core.backpressure import PauseReason
from sharedstream.core.ledger import Key, Target

# A fetch request: (generation, None = pause or the offset to seek to, why it pauses).
FetchRequest = tuple[int, int | None, PauseReason | None]
Command = tuple[Callable[[Any], Any], concurrent.futures.Future[Any]]


class Outbox:
    """Event loop -> consumer thread (see module docstring)."""

    def __init__(self, room: threading.Event) -> None:
        self._lock = threading.Lock()
        self._room = room  # set when the group resumes: a holding thread reads on
        self._published: dict[Key, Target] = {}
        self._fetches: dict[Key, FetchRequest] = {}
        self._group_paused = False
        self._check_ids = False
        self._commands: queue.SimpleQueue[Command] = queue.SimpleQueue()

    # -- commit targets ----------------------------------------------------------------

    def publish(self, targets: Mapping[Key, Target]) -> None:
        with self._lock:
            self._published.update(targets)

    @property
    def has_published(self) -> bool:
        """Targets wait to be taken (a peek without the lock, as the takes do)."""
        return bool(self._published)

    def take_published(self) -> dict[Key, Target]:
        if not self._published:
            return {}
        with self._lock:
            fresh, self._published = self._published, {}
        return fresh

    # -- fetching ----------------------------------------------------------------------

    def request_fetch(self, key: Key, request: FetchRequest) -> None:
        with self._lock:
            self._fetches[key] = request

    def take_fetches(self) -> dict[Key, FetchRequest]:
        if not self._fetches:
            return {}
        with self._lock:
            requests, self._fetches = self._fetches, {}
        return requests

    def retry_fetch(self, key: Key, request: FetchRequest) -> None:
        """Thread: a request that could not be applied yet goes again next turn (unless
        the loop asked something newer meanwhile)."""
        with self._lock:
            self._fetches.setdefault(key, request)

    def pause_group(self, paused: bool) -> None:
        """Loop: the group's flow control asks to stop fetching, or to go on."""
        with self._lock:
            self._group_paused = paused
        if not paused:
            self._room.set()

    @property
    def group_paused(self) -> bool:
        with self._lock:
            return self._group_paused

    # -- topic ids ---------------------------------------------------------------------

    def check_ids_now(self) -> None:
        with self._lock:
            self._check_ids = True

    def take_id_check(self) -> bool:
        if not self._check_ids:
            return False
        with self._lock:
            asked, self._check_ids = self._check_ids, False
        return asked

    # -- commands (the adapter's commit(), for tests and the bench) --------------------

    def command(self, fn: Callable[[Any], Any]) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._commands.put((fn, future))
        return future

    def run_commands(self, consumer: Any) -> None:
        """Thread: run the commands queued when the turn started; later ones wait for the
        next turn, so a caller reacting to one result cannot starve ``consume()``."""
        for _ in range(self._commands.qsize()):
            try:
                fn, future = self._commands.get_nowait()
            except queue.Empty:
                return
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(consumer))
            except BaseException as exc:
                future.set_exception(exc)

    def fail_commands(self, error: Exception) -> None:
        """Thread, as it ends: every command still queued fails with ``error``."""
        while True:
            try:
                _, future = self._commands.get_nowait()
            except queue.Empty:
                return
            if future.set_running_or_notify_cancel():
                future.set_exception(error)

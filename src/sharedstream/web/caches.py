"""The caches that keep a polled console cheap for the triggerers and the broker.

:class:`TtlCache` computes a value at most once per ``ttl`` per key, its callers
waiting for it (dead-letter topics). :class:`Refreshed` never makes a caller wait
once a key has a value: an old value is answered at once while one background
computation per key brings it up to date (the broker's view of groups, which the
overview shows for every group and which a broker that does not answer would
otherwise hold up for its whole timeout, tying up a worker thread per request).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class TtlCache:
    """Values computed at most once per ``ttl`` seconds per key, computed under a lock
    per key (concurrent callers wait for one computation)."""

    def __init__(self, ttl: float, max_keys: int = 256) -> None:
        self.ttl = ttl
        self.max_keys = max_keys
        self._values: dict[Any, tuple[float, Any]] = {}
        self._locks: dict[Any, threading.Lock] = {}
        self._guard = threading.Lock()

    def get(self, key: Any, compute: Callable[[], T]) -> T:
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            found = self._values.get(key)
            if found is not None and time.monotonic() - found[0] < self.ttl:
                value: T = found[1]
                return value
            value = compute()
            with self._guard:
                if len(self._values) >= self.max_keys:
                    self._values.clear()
                self._values[key] = (time.monotonic(), value)
            return value


class Refreshed(Generic[T]):
    """Per key, the last value of ``compute(key)`` and its age, recomputed on its own
    threads (at most one computation per key at a time) once older than ``ttl``.

    ``compute`` must not raise: it returns its failure as a value (a computation that
    raises anyway leaves the old value, and the next call tries again).
    """

    def __init__(self, compute: Callable[[Any], T], ttl: float, *, workers: int = 4,
                 max_keys: int = 256) -> None:
        self.compute = compute
        self.ttl = ttl
        self.max_keys = max_keys
        self._values: dict[Hashable, tuple[float, T]] = {}
        self._pending: dict[Hashable, Future[T]] = {}
        # Reentrant: a computation that finished already runs its callback at once, in
        # the thread that adds it, which holds the lock.
        self._lock = threading.RLock()
        self.workers = workers
        self._pool: ThreadPoolExecutor | None = None

    def peek(self, key: Hashable) -> tuple[float, T] | None:
        """``(seconds old, value)`` of the last computation, without starting one."""
        with self._lock:
            found = self._values.get(key)
        return None if found is None else (time.monotonic() - found[0], found[1])

    def refresh(self, key: Hashable) -> Future[T] | None:
        """The computation of ``key`` in flight (started now if the value is old), or
        None when the value is fresh."""
        with self._lock:
            found = self._values.get(key)
            if found is not None and time.monotonic() - found[0] < self.ttl:
                return None
            future = self._pending.get(key)
            if future is None:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(self.workers,
                                                    thread_name_prefix="console-refresh")
                future = self._pending[key] = self._pool.submit(self.compute, key)
                future.add_done_callback(lambda done: self._store(key, done))
            return future

    def _store(self, key: Hashable, done: Future[T]) -> None:
        with self._lock:
            self._pending.pop(key, None)
            if done.cancelled() or done.exception() is not None:
                return
            if key not in self._values and len(self._values) >= self.max_keys:
                self._values.clear()
            self._values[key] = (time.monotonic(), done.result())

    async def get(self, key: Hashable, *, fresh: bool) -> T:
        """The value of ``key``. ``fresh``: one at most ``ttl`` old, waiting for it if
        need be; otherwise the last one at once (waiting only for the very first),
        while an old one is refreshed in the background."""
        future = self.refresh(key)
        found = self.peek(key)
        if future is not None and (fresh or found is None):
            return await asyncio.wrap_future(future)
        assert found is not None
        return found[1]

    def close(self) -> None:
        """Wait for the computations in flight and stop the threads (a later call starts
        new ones: an app's lifespan may run again, as in tests)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

"""A watchdog thread that sees the event loop blocked, and names the watcher that holds it.

One event loop runs every watcher of a process. A filter that calls something blocking
(``time.sleep``, a synchronous HTTP client, a long parse) instead of awaiting it holds
the loop: every other watcher, the unit-of-work flushes and the commits wait with it,
and nothing on the loop can notice, because nothing else on it runs. So the watching
is done from a thread of its own:

* every :data:`CHECK_S` (at most) the thread posts one callback to the loop
  (``call_soon_threadsafe``) and notes the time; the loop answers by stamping it. A
  callback still unanswered after ``warn_after`` seconds means the loop has run nothing
  else for that long: one step is holding it. Only one callback is pending at a time,
  so a blocked loop does not pile them up.
* At that moment the thread reads the task running on the loop
  (``asyncio.current_task(loop)``); a watcher's filter runs in a task named after it
  (:func:`sharedstream.core.manager.watcher_task_name`), so the watcher is named
  without any per-message cost, and rightly even when the filter awaited before it
  blocked. A batch call made inline, in the fan-out's step (``core.inline``), names
  its watcher in ``inline.running``; the fan-out's own time is the framework's
  (``core.names.FRAMEWORK_TASK``), reported as such, never blamed on a watcher.
* Once per block: a WARNING when it passes ``warn_after``, naming the watcher, and a
  WARNING when the loop answers again, with how long it was blocked in all. Readiness
  (:meth:`LoopWatchdog.problems`) names the block while it is longer than
  ``[triggerer] loop_block_timeout``; :mod:`sharedstream.triggerer.metrics` exports the
  lag, the blocks and the seconds blocked by watcher.

Failure windows: a block shorter than ``warn_after`` is reported only through the lag
gauge, and only if a check happens to land in it; the durations are measured from the
posted callback, so they can fall short of the block by up to one check interval. A
loop kept busy by many short steps (not one long one) is reported the same way, naming
the task that runs when the threshold passes.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from sharedstream.core import inline
from sharedstream.core.manager import task_watcher
from sharedstream.core.names import FRAMEWORK_TASK

log = logging.getLogger(__name__)

WARN_AFTER_S = 1.0
"""A block is warned about once it lasts this long (or ``loop_block_timeout``, if less)."""
CHECK_S = 0.25
"""The longest time between two checks of the loop (shorter for a short threshold)."""
ADVICE = ("its filter step has not returned: await instead of blocking, or run blocking "
          "work in a thread with asyncio.to_thread; every watcher of this process waits")


@dataclass(frozen=True, slots=True)
class Block:
    """A block being reported: who holds the loop."""

    watcher: str  # the metric label: the watcher's name, or "" for anything else
    culprit: str  # for people: "watcher 'x' (...)", "task 'Task-7'", ...


class LoopWatchdog:
    """Watches ``loop`` from a daemon thread between :meth:`start` and :meth:`stop`."""

    def __init__(self, loop: asyncio.AbstractEventLoop, block_timeout: float, *,
                 warn_after: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.block_timeout = block_timeout
        self.warn_after = min(WARN_AFTER_S, block_timeout) if warn_after is None else warn_after
        self._loop = loop
        self._clock = clock
        self._interval = min(CHECK_S, self.warn_after / 4)
        self._posted = 0  # callbacks posted (the thread writes it)
        self._posted_at = clock()
        self._answered = 0  # the last callback the loop ran (the loop writes it)
        self._answered_at = self._posted_at
        self._block: Block | None = None
        self._lock = threading.Lock()  # the figures below, read by the health thread
        self._lag = 0.0
        self._blocks: dict[str, int] = {}
        self._blocked_seconds: dict[str, float] = {}
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="sharedstream-loopwatch",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._halt.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    # -- what readiness and metrics read (any thread) --------------------------------------

    def problems(self) -> list[str]:
        """Readiness reasons: the loop blocked longer than ``block_timeout`` now.

        Reported once the watch thread has named the block (within one check interval
        of ``warn_after``, which is at most ``block_timeout``): a reason that names no
        culprit sent an operator looking at nothing, and a readiness probe asked in that
        interval got one."""
        block = self._block
        if block is None or self._answered == self._posted:
            return []
        waited = self._clock() - self._posted_at
        if waited < self.block_timeout:
            return []
        return [f"event loop blocked for {waited:.1f}s by {block.culprit} "
                f"(longer than loop_block_timeout, {self.block_timeout:g}s)"]

    def figures(self) -> tuple[float, dict[str, int], dict[str, float]]:
        """The lag (seconds), blocks by watcher, seconds blocked by watcher (ended blocks)."""
        with self._lock:
            lag = self._lag
            if self._answered != self._posted:
                lag = max(lag, self._clock() - self._posted_at)
            return lag, dict(self._blocks), dict(self._blocked_seconds)

    # -- the thread ------------------------------------------------------------------------

    def _watch(self) -> None:
        self._post(self._clock())
        while not self._halt.wait(self._interval):
            self.check()

    def check(self) -> None:
        """One look at the loop: report a block that began or ended, post the next callback."""
        now = self._clock()
        if self._answered != self._posted:
            waited = now - self._posted_at
            with self._lock:
                self._lag = waited
            if self._block is None and waited >= self.warn_after:
                self._begin(waited)
            return
        lag = self._answered_at - self._posted_at
        with self._lock:
            self._lag = lag
        block = self._block
        if block is not None:
            self._block = None
            with self._lock:
                self._blocked_seconds[block.watcher] = (
                    self._blocked_seconds.get(block.watcher, 0.0) + lag)
            log.warning("event loop ran again after %.1f s (blocked by %s)", lag,
                        block.culprit, extra={"watcher": block.watcher or None})
        self._post(now)

    def _begin(self, waited: float) -> None:
        task = asyncio.current_task(self._loop)
        # A batch call made inline runs in the fan-out's task: the watcher holds the loop.
        watcher = inline.running or task_watcher(task)
        if watcher is not None:
            culprit = f"watcher {watcher!r}"
            advice = ADVICE
        elif task is None:
            culprit, advice = "a callback outside any task", "not a watcher's filter"
        elif task.get_name().startswith(FRAMEWORK_TASK):
            culprit = f"sharedstream itself ({task.get_name()[len(FRAMEWORK_TASK):]})"
            advice = "the framework's own work, not a watcher's filter"
        else:
            culprit, advice = f"task {task.get_name()!r}", "not a watcher's filter"
        self._block = Block(watcher or "", culprit)
        with self._lock:
            self._blocks[watcher or ""] = self._blocks.get(watcher or "", 0) + 1
        log.warning("event loop blocked for %.1f s by %s (%s)", waited, culprit, advice,
                    extra={"watcher": watcher})

    def _post(self, now: float) -> None:
        self._posted_at = now  # before the count: a reader never pairs it with an old time
        self._posted += 1
        try:
            self._loop.call_soon_threadsafe(self._answer, self._posted)
        except RuntimeError:  # the loop closed: nothing left to watch
            self._halt.set()

    def _answer(self, seq: int) -> None:
        """On the loop: the callback ran."""
        self._answered_at = self._clock()
        self._answered = seq

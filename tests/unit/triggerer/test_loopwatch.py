"""The loop watchdog names what holds a real event loop, from its own thread.

The loop runs in a thread of the test; a step on it blocks on a ``threading.Event``
the test sets once it has seen what it checks, so the block certainly lasts through
every check (nothing here depends on how long anything takes). The end-to-end test
(``tests/e2e/test_loop_block.py``) does the same through a real triggerer.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sharedstream.core.manager import watcher_task_name
from sharedstream.triggerer.loopwatch import LoopWatchdog


def until(condition: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)
    return value


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


def watch(loop: asyncio.AbstractEventLoop) -> LoopWatchdog:
    # Thresholds well above a scheduling hiccup of a loaded machine: no spurious block.
    watchdog = LoopWatchdog(loop, block_timeout=0.5, warn_after=0.5)
    watchdog.start()
    return watchdog


def named_block(watchdog: LoopWatchdog) -> Callable[[], list[str]]:
    """Readiness reasons (each names its culprit: the last test says why)."""
    return watchdog.problems


def test_a_watcher_task_blocking_the_loop_is_named_counted_and_unready_until_it_returns(
        loop: asyncio.AbstractEventLoop, caplog: pytest.LogCaptureFixture) -> None:
    watchdog = watch(loop)
    release = threading.Event()

    async def blocking_filter() -> None:
        release.wait(30)  # what a filter calling a blocking function does to the loop

    try:
        loop.call_soon_threadsafe(
            lambda: loop.create_task(blocking_filter(), name=watcher_task_name("w")))
        [reason] = until(named_block(watchdog), "readiness naming the block")
        assert "event loop blocked for" in reason and "by watcher 'w'" in reason, reason
        lag, blocks, _ = watchdog.figures()
        assert lag >= 0.5 and blocks == {"w": 1}
        release.set()
        until(lambda: "w" in watchdog.figures()[2], "the block's seconds counted")
        assert watchdog.problems() == []
        assert watchdog.figures()[1] == {"w": 1}  # one block, warned about once
        assert watchdog.figures()[2]["w"] >= 0.5
    finally:
        release.set()
        watchdog.stop()
    warnings = [r.getMessage() for r in caplog.records if r.name.endswith("loopwatch")]
    assert len(warnings) == 2, warnings
    assert "by watcher 'w' (its filter step has not returned" in warnings[0]
    assert warnings[1].startswith("event loop ran again after")


def test_a_plain_callback_or_another_task_is_not_blamed_on_a_watcher(
        loop: asyncio.AbstractEventLoop) -> None:
    watchdog = watch(loop)
    release = threading.Event()

    async def other() -> None:
        release.wait(30)

    try:
        loop.call_soon_threadsafe(release.wait, 30)
        [reason] = until(named_block(watchdog), "readiness naming the callback")
        assert "by a callback outside any task" in reason, reason
        release.set()
        until(lambda: watchdog.problems() == [] and "" in watchdog.figures()[2],
              "the callback's block ended")
        release.clear()
        loop.call_soon_threadsafe(lambda: loop.create_task(other(), name="housekeeping"))
        [reason] = until(named_block(watchdog), "readiness naming the task")
        assert "by task 'housekeeping'" in reason, reason
        assert watchdog.figures()[1] == {"": 2}  # counted, but under no watcher's name
    finally:
        release.set()
        watchdog.stop()


def test_readiness_reports_a_block_only_once_it_is_named() -> None:
    """The e2e test once read ``/readyz`` between the block passing ``block_timeout`` and
    the watch thread's next look: the reason named no watcher. Readiness now follows the
    watch thread's report. (A loop that is not running never answers: a block.)"""
    now = [0.0]
    idle = asyncio.new_event_loop()
    try:
        watchdog = LoopWatchdog(idle, block_timeout=1.0, clock=lambda: now[0])
        watchdog.check()  # posts the first callback; the loop never runs it
        now[0] = 5.0
        assert watchdog.problems() == []
        watchdog.check()
        [reason] = watchdog.problems()
        assert reason.startswith("event loop blocked for 5.0s by a callback outside any task")
    finally:
        idle.close()


def test_an_inline_batch_call_is_blamed_on_its_watcher_and_the_fan_out_on_nobody(
        loop: asyncio.AbstractEventLoop) -> None:
    """A batch call made inline runs in the fan-out's task: the watcher whose call holds
    the loop is named; the fan-out's own time is the framework's, never a watcher's."""
    from sharedstream.core import inline
    from sharedstream.core.names import framework_task_name

    watchdog = watch(loop)
    release = threading.Event()

    async def fan_out(inline_call: bool) -> None:
        inline.running = "w7" if inline_call else None
        try:
            release.wait(30)
        finally:
            inline.running = None

    try:
        loop.call_soon_threadsafe(lambda: loop.create_task(
            fan_out(True), name=framework_task_name("fan-out of group 'k'")))
        [reason] = until(named_block(watchdog), "readiness naming the inline call")
        assert "by watcher 'w7'" in reason, reason
        release.set()
        until(lambda: watchdog.problems() == [], "the inline call's block ended")
        release.clear()
        loop.call_soon_threadsafe(lambda: loop.create_task(
            fan_out(False), name=framework_task_name("fan-out of group 'k'")))
        [reason] = until(named_block(watchdog), "readiness naming the framework")
        assert "by sharedstream itself (fan-out of group 'k')" in reason, reason
        assert watchdog.figures()[1] == {"w7": 1, "": 1}
    finally:
        release.set()
        watchdog.stop()

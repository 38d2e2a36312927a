"""A group's hand-off of closed windows to the unit-of-work sink, once per loop step.

A stream submits a window as its filter moves past a message that bound events or
staged state (or a batch runner, per call); the windows submitted during one step of
the event loop go to the sink in one call at the end of it (``call_soon``), so a
burst of watchers finishing together costs the sink one hand-off, not one each.

Failure window: a sink that refuses the hand-off fails every window of it (each
watcher is failed for its message, which is held and retried); nothing is lost.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Hashable

from sharedstream.core.window import Window, WorkSink

# The group's logger: its lines are the group's (docs/architecture.md names them).
log = logging.getLogger("sharedstream.core.group")


class WindowOutbox:
    """Windows of one group waiting for the end of the loop's step (a part of ``Group``)."""

    __slots__ = ("_key", "_sink", "_waiting")

    def __init__(self, key: Hashable, sink: WorkSink) -> None:
        self._key = key
        self._sink = sink
        self._waiting: list[Window] = []

    def submit(self, window: Window) -> None:
        if not self._waiting:
            asyncio.get_running_loop().call_soon(self._flush)
        self._waiting.append(window)

    def _flush(self) -> None:
        windows, self._waiting = self._waiting, []
        if not windows:
            return
        try:
            self._sink.submit(windows)
        except Exception as exc:
            log.exception("group %r: the work sink refused %d windows", self._key, len(windows))
            for window in windows:
                window.fail(exc)

"""Driving message windows by hand for the unit-of-work tests (no manager, no broker).

``WindowDriver`` stands in for one watcher's stream: ``open`` makes the window of a
message current (so ``current_window()`` and the state access see it), ``close`` hands
it to the sink like the manager does, and the driver records what the sink resolved.
Closing and rejecting follow the window's own rules (``Window.close``,
``Window.withdraw``), the ones the real stream uses: nothing of the stream's logic is
copied here.
Payloads are ``(topic, partition, offset)``; ``coordinates`` keys events by them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sharedstream.core.message import CoordinateFields
from sharedstream.core.window import Window, current_stream
from sharedstream.triggers.base import TriggerEvent
from sharedstream.uow.sink import DatabaseWorkSink

Payload = tuple[str, int, int]


def coordinates(payload: Payload) -> CoordinateFields:
    topic, partition, offset = payload
    return (topic, f"id-{topic}", partition, offset)


class WindowDriver:
    def __init__(self, watcher: str, sink: DatabaseWorkSink) -> None:
        self.watcher = watcher
        self.sink = sink
        self.window: Window | None = None
        self.confirmed: list[Payload] = []
        self.failed: list[Payload] = []
        self.rejected: dict[Payload, str] = {}

    # the stream side (what window.py calls back)
    def current_window(self) -> Window | None:
        return self.window

    def reject(self, reason: str) -> bool:
        window = self.window
        if window is None:
            return False
        if window.withdraw(reason):  # the product's own rule for a rejected window
            self.rejected[window.payload] = reason
        return True

    def window_confirmed(self, window: Window) -> None:
        self.confirmed.append(window.payload)

    def window_failed(self, window: Window, exc: BaseException) -> None:
        self.failed.append(window.payload)

    def window_rejected(self, window: Window, reason: str) -> None:
        self.rejected[window.payload] = reason

    # the test side
    def open(self, payload: Payload) -> Window:
        self.window = Window(self, None, self.watcher, payload, payload)
        current_stream.set(self)
        return self.window

    def emit(self, *payloads: Any) -> None:
        assert self.window is not None
        self.window.events.extend(TriggerEvent(p) for p in payloads)

    def close(self, submit: bool = True) -> Window:
        """Close the open window by the product's rule; hand it to the sink when it has
        something to persist (``submit=False``: the test submits it later)."""
        window = self.window
        assert window is not None
        self.window = None
        if window.close() and submit:
            self.sink.submit([window])
        return window

    def handle(self, payload: Payload, *events: Any) -> Window:
        self.open(payload)
        self.emit(*events)
        return self.close()


def submit_all(sink: DatabaseWorkSink, windows: Sequence[Window]) -> None:
    sink.submit(list(windows))

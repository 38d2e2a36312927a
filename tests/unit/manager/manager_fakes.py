"""Fakes for the shared-stream manager's unit tests: producer, sink, trigger, helpers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Mapping, Sequence
from typing import Any

from sharedstream.producer.contract import (
    AdvanceItem,
    AdvanceOutcome,
    ForgetLanes,
    SharedStreamProducer,
    StreamItem,
)
from sharedstream.triggerer.manager import SharedStreamManager
from sharedstream.triggerer.streamconfig import ManagerSettings, ManualClock
from sharedstream.triggerer.window import Window
from sharedstream.triggers.base import BaseEventTrigger, TriggerEvent

Payload = tuple[str, int]  # (lane, offset); the raw message is "lane:offset"

_END = object()


def raw_of(payload: Payload) -> str:
    return f"{payload[0]}:{payload[1]}"


class FakeProducer(SharedStreamProducer[Payload]):
    """Yields what the test feeds; records advances, pauses and closes."""

    def __init__(self, kwargs: Mapping[str, Any]) -> None:
        self.kwargs = dict(kwargs)
        self._items: asyncio.Queue[Any] = asyncio.Queue()
        self.opened = False
        self.advanced: list[tuple[Hashable, list[AdvanceItem[Payload]]]] = []
        self.gates: dict[Hashable, asyncio.Event] = {}
        self.advance_error: Exception | None = None
        self.lane_error: Exception | None = None
        self.targets_of: dict[Payload, frozenset[str]] = {}
        self.paused = False
        self.pause_calls = 0
        self.resume_calls = 0
        self.aclose_calls = 0

    # driving
    def feed(self, *payloads: Payload) -> None:
        self._items.put_nowait([(raw_of(p), p) for p in payloads])

    def forget(self, *lanes: str) -> None:
        self._items.put_nowait(ForgetLanes(frozenset(lanes)))

    def end(self) -> None:
        self._items.put_nowait(_END)

    def explode(self, exc: Exception) -> None:
        self._items.put_nowait(exc)

    # observing
    def items(self, lane: str | None = None) -> list[tuple[Payload, AdvanceOutcome]]:
        return [(item.broker_payload, item.outcome) for key, batch in self.advanced
                for item in batch if lane is None or key == lane]

    def outcome(self, payload: Payload) -> AdvanceOutcome:
        found = [o for p, o in self.items() if p == payload]
        assert found, f"{payload} was never advanced"
        return found[-1]

    def batch_sizes(self, lane: str) -> list[int]:
        return [len(batch) for key, batch in self.advanced if key == lane]

    # contract
    async def open_stream(self) -> AsyncIterator[StreamItem[Payload]]:
        self.opened = True
        while True:
            item = await self._items.get()
            if item is _END:
                return
            if isinstance(item, Exception):
                raise item
            yield item

    async def advance(self, batch: Sequence[AdvanceItem[Payload]]) -> None:
        assert batch, "advance() got an empty batch"
        lanes = {item.broker_payload[0] for item in batch}
        assert len(lanes) == 1, f"advance() mixed lanes {lanes}"
        lane = lanes.pop()
        gate = self.gates.get(lane)
        if gate is not None:
            await gate.wait()
        if self.advance_error is not None:
            raise self.advance_error
        self.advanced.append((lane, list(batch)))

    def get_advance_lane(self, payload: Payload) -> Hashable:
        if self.lane_error is not None:
            raise self.lane_error
        return payload[0]

    def message_identity(self, payload: Payload) -> Hashable:
        return payload

    def targets(self, payload: Payload) -> frozenset[str] | None:
        return self.targets_of.get(payload)

    def pause(self) -> None:
        self.paused = True
        self.pause_calls += 1

    def resume(self) -> None:
        self.paused = False
        self.resume_calls += 1

    async def aclose(self) -> None:
        self.aclose_calls += 1


Handler = Callable[[str], Awaitable[list[Any]]]


async def filter_out(message: str) -> list[Any]:
    return []


async def one_event(message: str) -> list[Any]:
    return [message]


class FakeTrigger(BaseEventTrigger):
    """Handles each message with ``handler`` (events to yield; may reject, raise, hang)."""

    producers: list[FakeProducer] = []
    factory_error: Exception | None = None

    def __init__(self, key: str = "k", handler: Handler = filter_out, **extra: Any) -> None:
        self.key = key
        self.handler = handler
        self.extra = extra
        self.seen: list[str] = []
        self.starts = 0

    def shared_stream_key(self) -> Hashable:
        return self.key

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return "tests.FakeTrigger", {"key": self.key, **self.extra}

    @classmethod
    def create_shared_stream_producer(cls, kwargs: Mapping[str, Any]) -> FakeProducer:
        if cls.factory_error is not None:
            raise cls.factory_error
        producer = FakeProducer(kwargs)
        cls.producers.append(producer)
        return producer

    async def filter_shared_stream(self, stream: AsyncIterator[Any]) -> AsyncIterator[TriggerEvent]:
        self.starts += 1
        async for message in stream:
            self.seen.append(message)
            for payload in await self.handler(message):
                yield TriggerEvent(payload)


class FakeSink:
    """Collects submitted windows; confirms at once when ``auto``."""

    def __init__(self) -> None:
        self.batches: list[list[Window]] = []
        self.auto = False

    @property
    def windows(self) -> list[Window]:
        return [w for batch in self.batches for w in batch]

    def submit(self, windows: Sequence[Window]) -> None:
        self.batches.append(list(windows))
        if self.auto:
            for window in windows:
                window.confirm()

    def confirm(self, watcher: str, raw: str) -> None:
        self._find(watcher, raw).confirm()

    def fail(self, watcher: str, raw: str, exc: Exception) -> None:
        self._find(watcher, raw).fail(exc)

    def _find(self, watcher: str, raw: str) -> Window:
        found = [w for w in self.windows if w.watcher == watcher and w.raw == raw]
        assert found, f"no window of {watcher} for {raw}"
        return found[-1]


async def settle(rounds: int = 40) -> None:
    """Let every ready task run: the fakes never wait on real time, so a bounded
    number of loop iterations reaches quiescence deterministically."""
    for _ in range(rounds):
        await asyncio.sleep(0)


def make_manager(sink: FakeSink, clock: ManualClock, **settings: Any) -> SharedStreamManager:
    settings.setdefault("cohort_grace_period", 10.0)
    return SharedStreamManager(sink, ManagerSettings(**settings), clock)


class Harness:
    """A manager plus running watchers, for the common case of one group ``k``."""

    def __init__(self, cohort: Sequence[str], **settings: Any) -> None:
        FakeTrigger.producers.clear()
        FakeTrigger.factory_error = None
        self.clock = ManualClock()
        self.sink = FakeSink()
        self.manager = make_manager(self.sink, self.clock, **settings)
        self.manager.declare_cohort("k", cohort)
        self.triggers: dict[str, FakeTrigger] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}

    def start(self, name: str, handler: Handler = filter_out) -> FakeTrigger:
        trigger = self.triggers[name] = FakeTrigger("k", handler)
        self.tasks[name] = asyncio.get_running_loop().create_task(
            self.manager.run_watcher(name, trigger))
        return trigger

    @property
    def producer(self) -> FakeProducer:
        return FakeTrigger.producers[-1]

    async def stop(self) -> None:
        await self.manager.stop_all()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)

"""The manager's unit-test harness: the in-memory adapter, a sink, a trigger, helpers.

Groups run on :class:`~sharedstream.testing.memorystream.MemoryStream`, the project's in-memory
adapter behind the same contract as the Kafka one; outcomes are read from the group's
partition ledger and the adapter's dead letters, as the Kafka adapter would see them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Mapping, Sequence
from typing import Any, NamedTuple

from sharedstream.core.group import Group
from sharedstream.core.ledger import Entry, State
from sharedstream.core.manager import SharedStreamManager
from sharedstream.core.streamconfig import ManagerSettings, ManualClock
from sharedstream.core.window import Window
from sharedstream.testing.memorystream import MemoryStream
from sharedstream.triggers.base import BaseEventTrigger, TriggerEvent

Coordinates = tuple[str, int]  # (lane, offset); the raw message is "lane:offset"


class FakeProducer(MemoryStream):
    """The in-memory adapter, remembering the arguments the group was built from.

    Commit targets are published only when a test asks (``Harness.publish``): a publish
    ends the ledger's record of what it covers, which the tests read."""

    commit_when_idle = False

    def __init__(self, kwargs: Mapping[str, Any]) -> None:
        super().__init__(commit_interval=3600.0)
        self.kwargs = dict(kwargs)


class Outcome(NamedTuple):
    """What became of one message so far, read from the ledger and the dead letters."""

    state: State
    acked: frozenset[str]
    failed: frozenset[str]
    rejected: dict[str, str]

    @property
    def is_clean(self) -> bool:
        return self.state is not State.HELD


Handler = Callable[[str], Awaitable[list[Any]]]


async def filter_out(message: str) -> list[Any]:
    return []


async def one_event(message: str) -> list[Any]:
    return [message]


def fails_once() -> Handler:
    """A handler that raises on the first message it is handed, then filters out."""
    failing = {"once": True}

    async def handler(message: str) -> list[Any]:
        if failing.pop("once", False):
            raise RuntimeError("flaky")
        return []

    return handler


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


async def settle() -> None:
    """Run the loop until nothing is ready to run: every task then waits for something
    only a test step gives (a feed, the manual clock, a gate, a confirm). Nothing here
    waits on real time or a thread, so a negative asserted after it is quiescence, not
    a count of turns that happened to be enough."""
    loop = asyncio.get_running_loop()
    for _ in range(100_000):
        await asyncio.sleep(0)
        if not loop._ready:  # type: ignore[attr-defined]  # the loop's run queue
            return
    raise AssertionError("the event loop never went quiet")


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

    @property
    def group(self) -> Group:
        return self.manager._groups["k"]

    def entry(self, where: Coordinates) -> Entry | None:
        partition = self.group.ledger.partitions.get((where[0], 0))
        return None if partition is None else partition.entries.get(where[1])

    def outcome(self, where: Coordinates) -> Outcome:
        """The outcome of a resolved message; fails for one still pending."""
        entry = self.entry(where)
        assert entry is not None, f"{where} is not in the ledger"
        assert entry.state is not State.PENDING, f"{where} is still pending"
        letters = [r for p, r in self.producer.dead_letters if p.coordinates == where]
        rejected = letters[-1] if letters else dict(entry.rejected or {})
        if entry.state is State.HELD:
            failed = frozenset(entry.failed or {})
            return Outcome(entry.state, entry.acked_before or frozenset(), failed, rejected)
        acked = entry.targets - rejected.keys() if entry.targets else frozenset()
        return Outcome(entry.state, frozenset(acked), frozenset(), rejected)

    def resolved(self) -> list[Coordinates]:
        """Messages of every lane that are no longer pending, in read order."""
        return [(key[0], offset) for key, partition in self.group.ledger.partitions.items()
                for offset, entry in partition.entries.items()
                if entry.state is not State.PENDING]

    def publish(self) -> dict[str, int]:
        """Publish commit targets now; the committed offset per lane."""
        self.group.targets.publish()
        return {key[0]: target[1] for key, target in self.producer.published.items()}

    async def stop(self) -> None:
        await self.manager.stop_all()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)

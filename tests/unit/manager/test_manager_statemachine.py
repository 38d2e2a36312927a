"""Random interleavings of broadcasts, acks, rejects, exceptions, timeouts, restarts,
joins and leaves, checked against the manager's invariants (hypothesis stateful)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from manager_fakes import FakeSink, FakeTrigger, Payload, make_manager, settle

from sharedstream.producer.contract import AdvanceOutcome
from sharedstream.triggerer.stream import SharedStream
from sharedstream.triggerer.streamconfig import ManualClock
from sharedstream.triggers.base import TriggerEvent

pytestmark = pytest.mark.unit

COHORT = ("a", "b", "c")
LANES = ("p", "q")
T = TypeVar("T")

watchers = st.sampled_from(COHORT)


class ManagerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        FakeTrigger.producers.clear()
        FakeTrigger.factory_error = None
        self.clock = ManualClock()
        self.sink = FakeSink()
        self.manager = make_manager(self.sink, self.clock, ack_timeout=5.0, max_attempts=3,
                                    max_in_flight=1000)
        self.manager.declare_cohort("k", COHORT)
        self.streams: dict[str, SharedStream] = {}
        for name in COHORT:
            self._join(name)
        self.producer = FakeTrigger.producers[0]
        self.next_offset = dict.fromkeys(LANES, 0)
        self.model_lane: dict[str, list[Payload]] = {lane: [] for lane in LANES}
        self.in_flight: set[Payload] = set()
        self.held: set[Payload] = set()
        self.last: dict[Payload, AdvanceOutcome] = {}
        self.clean_advances: dict[Payload, int] = {}
        self.checked = 0
        self.handed: dict[str, list[str]] = {name: [] for name in COHORT}

    # -- plumbing ------------------------------------------------------------------

    def _run(self, fn: Callable[[], T]) -> T:
        async def call() -> T:
            result = fn()
            await settle(10)
            return result

        return self.loop.run_until_complete(call())

    def _join(self, name: str) -> None:
        self.streams[name] = self._run(lambda: self.manager.subscribe(name, FakeTrigger("k")))

    def _accept(self, payloads: list[Payload]) -> None:
        """Model what the manager takes from a batch: new or held messages, in order."""
        for payload in payloads:
            if payload in self.in_flight:
                continue  # a copy of a message in flight: dropped
            self.held.discard(payload)
            self.in_flight.add(payload)
            self.model_lane[payload[0]].append(payload)
        self.producer.feed(*payloads)

    def _absorb_advances(self) -> None:
        items = self.producer.items()
        for payload, outcome in items[self.checked:]:
            lane = self.model_lane[payload[0]]
            # FIFO per lane, never past an unresolved message
            assert lane and lane[0] == payload, (payload, lane)
            lane.pop(0)
            assert outcome.acked.isdisjoint(outcome.failed)
            assert outcome.acked.isdisjoint(outcome.rejected)
            assert outcome.failed.isdisjoint(outcome.rejected)
            assert len(outcome.acked) + len(outcome.failed) + len(outcome.rejected) == len(COHORT)
            self.in_flight.discard(payload)
            self.last[payload] = outcome
            if outcome.is_clean:
                self.clean_advances[payload] = self.clean_advances.get(payload, 0) + 1
            else:
                self.held.add(payload)
                assert outcome.retry_after > 0
        self.checked = len(items)

    def _live(self, name: str) -> SharedStream | None:
        stream = self.streams.get(name)
        return stream if stream is not None and not stream._closed else None

    # -- rules -----------------------------------------------------------------------

    @rule(lane=st.sampled_from(LANES), count=st.integers(1, 4))
    def broadcast(self, lane: str, count: int) -> None:
        start = self.next_offset[lane]
        self.next_offset[lane] += count
        self._accept([(lane, o) for o in range(start, start + count)])
        self._run(lambda: None)

    @precondition(lambda self: self.held or self.in_flight)
    @rule(data=st.data())
    def reread(self, data: st.DataObject) -> None:
        """The producer reads held messages again (and maybe a copy of one in flight)."""
        pool = sorted(self.held | self.in_flight)
        picked = data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3, unique=True))
        by_lane = sorted(picked)  # the producer re-reads each lane from its floor, in order
        self._accept(by_lane)
        self._run(lambda: None)

    @rule(name=watchers)
    def take_next(self, name: str) -> None:
        stream = self._live(name)
        if stream is None or not stream.queued:
            return
        raw = self._run(lambda: self.loop.create_task(stream.__anext__()))
        self.handed[name].append(raw.result())

    @rule(name=watchers)
    def emit(self, name: str) -> None:
        stream = self._live(name)
        if stream is not None:
            self._run(lambda: stream.bind_event(TriggerEvent(name)))

    @rule(name=watchers)
    def reject(self, name: str) -> None:
        stream = self._live(name)
        if stream is not None:
            self._run(lambda: stream.reject("no"))

    @rule(name=watchers)
    def crash(self, name: str) -> None:
        stream = self._live(name)
        if stream is not None:
            self._run(lambda: stream.fail_open(ValueError("boom")))

    @precondition(lambda self: self.sink.windows)
    @rule(data=st.data(), ok=st.booleans())
    def unit_of_work(self, data: st.DataObject, ok: bool) -> None:
        window = data.draw(st.sampled_from(self.sink.windows))
        self._run(window.confirm if ok else lambda: window.fail(OSError("db down")))

    @rule()
    def time_passes(self) -> None:
        self._run(lambda: self.clock.advance(5.0))

    @rule(name=watchers)
    def leave(self, name: str) -> None:
        if self._live(name) is None or sum(1 for n in COHORT if self._live(n)) < 2:
            return
        self.loop.run_until_complete(self.manager.unsubscribe(name))
        self._run(lambda: None)

    @rule(name=watchers)
    def join(self, name: str) -> None:
        if self._live(name) is None:
            self._join(name)

    # -- invariants ------------------------------------------------------------------

    @invariant()
    def lanes_advance_in_order_with_complete_outcomes(self) -> None:
        self._absorb_advances()

    @invariant()
    def redelivery_only_to_watchers_that_owe_the_message(self) -> None:
        for name, raws in self.handed.items():
            for raw in set(raws):
                lane, offset = raw.split(":")
                payload = (lane, int(offset))
                if raws.count(raw) > 1:
                    outcome = self.last.get(payload)
                    assert outcome is not None and name not in outcome.acked

    @invariant()
    def every_message_is_advanced_clean_at_most_once(self) -> None:
        assert all(n == 1 for n in self.clean_advances.values())

    def teardown(self) -> None:
        self.loop.run_until_complete(self.manager.stop_all())
        self._absorb_advances()
        # Every message is advanced clean exactly once, or was abandoned (held or in flight).
        for lane in LANES:
            for offset in range(self.next_offset[lane]):
                payload = (lane, offset)
                if payload not in self.clean_advances:
                    assert payload in self.held or payload in self.in_flight
                else:
                    final = self.last[payload]
                    assert final.acked | final.rejected.keys() == set(COHORT)
        assert self.producer.aclose_calls == 1
        self.loop.close()


ManagerMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40,
                                            deadline=None)
TestManagerMachine = ManagerMachine.TestCase

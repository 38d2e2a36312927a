"""Groups, cohorts, subscription rules, start and stop of the shared-stream manager."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest
from manager_fakes import FakeSink, FakeTrigger, Harness, make_manager, one_event, settle

from sharedstream.core.streamconfig import (
    GroupFailedError,
    ManagerSettings,
    ManualClock,
    ProducerFactoryError,
)
from sharedstream.triggers.base import (
    BaseEventTrigger,
    SharedStreamConflictError,
    reject_shared_stream_event,
)

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _reset_fakes() -> None:
    FakeTrigger.producers.clear()
    FakeTrigger.factory_error = None


async def test_one_group_per_key_built_by_the_first_subscriber() -> None:
    manager = make_manager(FakeSink(), ManualClock())
    manager.declare_cohort("k1", ["a", "b"])
    manager.declare_cohort("k2", ["c"])
    manager.subscribe("a", FakeTrigger("k1"))
    assert len(FakeTrigger.producers) == 1
    manager.subscribe("b", FakeTrigger("k1"))
    manager.subscribe("c", FakeTrigger("k2"))
    assert [p.kwargs["key"] for p in FakeTrigger.producers] == ["k1", "k2"]
    assert manager.group_key_of("b") == "k1"
    await manager.stop_all()


async def test_last_leaving_stops_the_group_and_a_resubscribe_gets_a_fresh_one() -> None:
    manager = make_manager(FakeSink(), ManualClock())
    manager.declare_cohort("k", ["a", "b"])
    manager.subscribe("a", FakeTrigger())
    manager.subscribe("b", FakeTrigger())
    first = FakeTrigger.producers[0]
    await manager.unsubscribe("a")
    assert first.aclose_calls == 0
    leaving = asyncio.create_task(manager.unsubscribe("b"))
    await asyncio.sleep(0)
    # Racing the old group's shutdown: the new subscriber gets a new group.
    manager.subscribe("a", FakeTrigger())
    await leaving
    assert first.aclose_calls == 1
    assert len(FakeTrigger.producers) == 2
    assert FakeTrigger.producers[1].aclose_calls == 0
    await manager.stop_all()
    assert first.aclose_calls == 1


async def test_duplicate_watcher_none_key_and_foreign_watchers_are_rejected() -> None:
    manager = make_manager(FakeSink(), ManualClock())
    manager.declare_cohort("k", ["a"])
    manager.subscribe("a", FakeTrigger())
    with pytest.raises(ValueError, match="already subscribed"):
        manager.subscribe("a", FakeTrigger())
    with pytest.raises(ValueError, match="not in the cohort"):
        manager.subscribe("x", FakeTrigger())
    with pytest.raises(ValueError, match="no cohort declared"):
        manager.subscribe("y", FakeTrigger("other"))

    class Unshared(BaseEventTrigger):
        def serialize(self) -> tuple[str, dict[str, object]]:
            return "Unshared", {}

    with pytest.raises(ValueError, match="does not share a stream"):
        manager.subscribe("z", Unshared())
    with pytest.raises(ValueError, match="None"):
        manager.declare_cohort(None, ["a"])
    with pytest.raises(ValueError, match="more than once"):
        manager.declare_cohort("k3", ["a", "a"])
    await manager.stop_all()


async def test_triggers_disagreeing_on_an_argument_name_both_watchers() -> None:
    manager = make_manager(FakeSink(), ManualClock())
    manager.declare_cohort("k", ["a", "b"])
    manager.subscribe("a", FakeTrigger(dlq_topic="x.dlq"))
    with pytest.raises(SharedStreamConflictError, match=r"'a' and 'b'.*dlq_topic"):
        manager.subscribe("b", FakeTrigger(dlq_topic="y.dlq"))
    await manager.stop_all()


async def test_filter_only_arguments_do_not_split_a_group() -> None:
    class Threshold(FakeTrigger):
        """Adds ``limit`` (a filter-only kwarg) outside its shared-stream arguments."""

        def __init__(self, limit: int) -> None:
            super().__init__(dlq_topic="x.dlq")
            self.limit = limit

        def serialize(self) -> tuple[str, dict[str, Any]]:
            path, kwargs = super().serialize()
            return path, {**kwargs, "limit": self.limit}

        def shared_stream_arguments(self) -> Mapping[str, Any]:
            return {"key": self.key, **self.extra}

    manager = make_manager(FakeSink(), ManualClock())
    manager.declare_cohort("k", ["a", "b", "c"])
    manager.subscribe("a", Threshold(1))
    manager.subscribe("b", Threshold(2))
    manager.subscribe("c", FakeTrigger(dlq_topic="x.dlq"))
    [producer] = FakeTrigger.producers
    assert producer.kwargs == {"key": "k", "dlq_topic": "x.dlq"}
    await manager.stop_all()


async def test_polling_waits_for_the_whole_cohort() -> None:
    h = Harness(["a", "b"])
    h.start("a")
    await settle()
    assert not h.producer.opened
    h.start("b")
    await settle()
    assert h.producer.opened
    await h.stop()


async def test_after_the_grace_period_a_missing_watcher_counts_as_failed() -> None:
    h = Harness(["a", "b"], cohort_grace_period=10.0, retry_backoff_initial=2.0)
    h.start("a")
    await settle()
    h.clock.advance(9.999)
    await settle()
    assert not h.producer.opened
    h.clock.advance(0.001)
    await settle()
    assert h.producer.opened
    h.producer.feed(("p", 0))
    await settle()
    outcome = h.outcome(("p", 0))
    assert outcome.acked == {"a"}
    assert outcome.failed == {"b"}
    assert not outcome.is_clean
    h.clock.advance(1.999)
    assert h.group.counters.redelivered == 0
    h.clock.advance(0.001)  # retry_backoff_initial: b is still absent, so it is held again
    assert h.group.counters.redelivered == 1
    assert h.outcome(("p", 0)).failed == {"b"}
    await h.stop()


async def test_factory_failure_is_terminal() -> None:
    FakeTrigger.factory_error = RuntimeError("no such connection")
    manager = make_manager(FakeSink(), ManualClock())
    manager.declare_cohort("k", ["a"])
    with pytest.raises(ProducerFactoryError, match="no such connection"):
        await manager.run_watcher("a", FakeTrigger())
    assert manager.group_key_of("a") is None
    assert FakeTrigger.producers == []


@pytest.mark.parametrize("failure", ["raise", "return"])
async def test_producer_error_evicts_the_group_and_fails_every_watcher(failure: str) -> None:
    h = Harness(["a", "b"])
    h.start("a")
    h.start("b")
    await settle()
    producer = h.producer
    if failure == "raise":
        producer.explode(ConnectionError("broker gone"))
    else:
        producer.finish()
    await settle()
    for name in ("a", "b"):
        assert h.tasks[name].done()
        with pytest.raises(GroupFailedError):
            h.tasks[name].result()
    assert producer.aclose_calls == 1
    assert h.manager.group_key_of("a") is None
    # A fresh subscribe gets a fresh group.
    h.start("a")
    await settle()
    assert len(FakeTrigger.producers) == 2
    await h.stop()
    assert producer.aclose_calls == 1


async def test_an_adapter_refusing_a_dead_letter_terminates_the_group_and_is_logged(
        caplog: pytest.LogCaptureFixture) -> None:
    def refuse(*args: Any) -> None:
        raise OSError("dead letter refused")

    async def reject(message: str) -> list[Any]:
        reject_shared_stream_event("bad")
        return []

    h = Harness(["a"])
    h.start("a", reject)
    await settle()
    h.producer.dead_letter = refuse  # type: ignore[method-assign]
    h.producer.feed(("p", 0))
    await settle()
    with pytest.raises(GroupFailedError):
        h.tasks["a"].result()
    assert h.producer.aclose_calls == 1
    assert "dead letter refused" in caplog.text
    await h.stop()


async def test_stop_commits_what_resolved_and_abandons_the_rest() -> None:
    h = Harness(["a", "b"])
    h.start("a")
    h.start("b", one_event)
    await settle()
    h.producer.feed(("p", 0), ("p", 1), ("q", 0))
    await settle()
    h.sink.confirm("b", "p:0")
    # p:1 and q:0 are still in b's unit of work when we stop.
    await settle()
    group = h.group
    await h.manager.stop_all()
    assert h.producer.published == {("p", 0): (0, 1, ())}  # q:0 never resolved
    assert h.producer.aclose_calls == 1
    await asyncio.gather(*h.tasks.values())  # runners return normally
    h.sink.confirm("b", "p:1")  # a late confirm is ignored
    await settle()
    assert h.producer.published == {("p", 0): (0, 1, ())}
    assert group.ledger.partitions == {} and group.in_flight == 0


def test_settings_are_validated() -> None:
    with pytest.raises(ValueError, match="max_in_flight"):
        ManagerSettings(max_in_flight=0)
    with pytest.raises(ValueError, match="retry_backoff_max"):
        ManagerSettings(retry_backoff_initial=5, retry_backoff_max=1)
    settings = ManagerSettings(retry_backoff_initial=1, retry_backoff_max=5)
    assert [settings.backoff(n) for n in (1, 2, 3, 4, 50)] == [1, 2, 4, 5, 5]

"""An InfrastructureError from a filter holds the message forever: never dead-lettered,
retried with backoff, or sooner when it says when to try again (``retry_after``)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka.schema_registry.error import SchemaRegistryError
from manager_fakes import Harness, settle
from test_manager_batches import start_batch

from sharedstream import MessageBatch
from sharedstream.core.ledger import State
from sharedstream.core.streamconfig import InfrastructureError
from sharedstream.serde.lookups import RegistryHealth, SchemaNotFound, SharedLookups
from sharedstream.triggers.base import reject_shared_stream_event


async def test_infrastructure_errors_never_count_towards_max_attempts() -> None:
    outage = {"on": True}

    async def downstream(message: str) -> list[Any]:
        if outage["on"]:
            raise InfrastructureError("target down")
        return []

    h = Harness(["a"], max_attempts=2, retry_backoff_initial=1.0, retry_backoff_max=4.0)
    h.start("a", downstream)
    await settle()
    h.producer.feed(("p", 0))
    await settle()
    for _attempt in range(5):  # well past max_attempts
        outcome = h.outcome(("p", 0))
        assert outcome.failed == {"a"} and not outcome.rejected
        h.clock.advance(10.0)  # past the backoff: handed out again, and fails again
        await settle()
    assert h.triggers["a"].seen == ["p:0"] * 6
    outage["on"] = False
    h.clock.advance(10.0)
    await settle()
    final = h.outcome(("p", 0))
    assert final.acked == {"a"} and final.state is State.TERMINAL
    await h.stop()


class RegistryDown(InfrastructureError):
    """An outage whose source logs its start and end itself (as the schema registry's
    lookups do): the waiting watcher adds nothing above DEBUG."""

    reported = True


@pytest.mark.parametrize("error", [InfrastructureError, RegistryDown])
async def test_an_outage_logs_no_traceback_per_retry(
        error: type[InfrastructureError], caplog: pytest.LogCaptureFixture) -> None:
    """Issue 41 §3.5: before, each retry logged the filter's traceback and a restart
    line at WARNING (37 tracebacks while one message waited on a registry)."""
    outage = {"on": True}

    async def downstream(message: str) -> list[Any]:
        if outage["on"]:
            raise error("target down")
        return []

    caplog.set_level(logging.DEBUG, logger="sharedstream")
    h = Harness(["a"], max_attempts=2, retry_backoff_initial=1.0, retry_backoff_max=4.0)
    h.start("a", downstream)
    await settle()
    h.producer.feed(("p", 0))
    await settle()
    for _attempt in range(5):
        h.clock.advance(10.0)
        await settle()
    assert h.triggers["a"].seen == ["p:0"] * 6
    outage["on"] = False
    h.clock.advance(10.0)
    await settle()
    assert h.outcome(("p", 0)).acked == {"a"}
    await h.stop()
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    if error is RegistryDown:
        assert warnings == [], warnings
    else:  # its source is silent: one line per retry, which says what it waits on
        assert len(warnings) == 6, warnings
        assert all("waiting on infrastructure (InfrastructureError: target down)" in w
                   for w in warnings), warnings


@pytest.mark.parametrize(("retry_after", "retried_at"), [(3.0, 3.0), (500.0, 40.0)])
@pytest.mark.parametrize("batch", [False, True])
async def test_retry_after_brings_the_retry_forward_and_never_delays_it(
        retry_after: float, retried_at: float, batch: bool) -> None:
    """An InfrastructureError that says when to try again is retried then, if that is
    sooner than the backoff (40 s here, the full nominal delay under these tests)."""
    outage = {"on": True}

    def refuse() -> None:
        if outage.pop("on", False):
            raise InfrastructureError("quota spent", retry_after=retry_after)

    async def handler(message: str) -> list[Any]:
        refuse()
        return []

    async def batch_handler(messages: MessageBatch) -> None:
        refuse()

    h = Harness(["a"], retry_backoff_initial=40.0, retry_backoff_max=40.0)
    calls = start_batch(h, "a", batch_handler).calls if batch else None
    if not batch:
        h.start("a", handler)
    await settle()
    h.producer.feed(("p", 0))
    await settle()
    assert h.outcome(("p", 0)).failed == {"a"}
    h.clock.advance(retried_at - 0.01)
    await settle()
    assert h.outcome(("p", 0)).failed == {"a"}  # still held, just before its moment
    h.clock.advance(0.02)
    await settle()
    assert h.outcome(("p", 0)).acked == {"a"}
    assert (calls if batch else h.triggers["a"].seen) == ([["p:0"]] * 2 if batch
                                                         else ["p:0"] * 2)
    await h.stop()


class MissingSchemaRegistry(SharedLookups):
    """A registry client with the real 404 rule (serde.lookups) over a stand-in registry
    that serves (its subject list answers) and knows no schema id."""

    def __init__(self, clock: Callable[[], float], grace: float) -> None:
        self._share_lookups(RegistryHealth("r", clock), grace)

    def get_schema(self, schema_id: int) -> Any:
        def fetch() -> Any:
            raise SchemaRegistryError(404, 40403, f"Schema {schema_id} not found")
        return self._shared(("id", schema_id), f"schema id {schema_id}", fetch)

    def get_subjects(self) -> list[str]:
        return []


async def test_a_missing_schema_is_rejected_at_the_end_of_its_grace_not_a_backoff_later(
        ) -> None:
    """Before: the message held for an unknown schema id was rejected at the first retry
    after ``missing.schema.grace.sec``, up to a whole backoff step later (the README's
    unknown id: 47-57 s with a 30 s grace). The registry's hold says when its grace ends
    (``InfrastructureError.retry_after``); the retry comes then, for the per-message and
    the batch watcher alike."""
    grace, cap = 5.0, 100.0
    h = Harness(["a", "b"], retry_backoff_initial=cap, retry_backoff_max=cap)
    registry = MissingSchemaRegistry(h.clock.now, grace)

    async def decode(message: str) -> list[Any]:
        try:
            registry.get_schema(7)
        except SchemaNotFound as exc:
            reject_shared_stream_event(exc.reason)
        return []

    async def decode_batch(batch: MessageBatch) -> None:
        for message in batch:
            try:
                registry.get_schema(7)
            except SchemaNotFound as exc:
                batch.reject(message, exc.reason)

    h.start("a", decode)
    start_batch(h, "b", decode_batch)
    await settle()
    h.producer.feed(("p", 0))
    await settle()
    assert h.outcome(("p", 0)).failed == {"a", "b"}  # held: within the grace
    h.clock.advance(grace + 0.5)  # the grace's end, and a margin far below the backoff
    await settle()
    reason = "schema id 7: not found in schema registry 'r' (Schema 7 not found)"
    assert h.producer.dead_letters[-1][1] == {"a": reason, "b": reason}
    assert h.triggers["a"].seen == ["p:0", "p:0"]  # handed out once more, at the grace's end
    await h.stop()

"""Unit tests of the example watchers (orders_watchers.py), with no Kafka and no database.

``sharedstream.testing.WatcherHarness`` runs them through the real engine on an
in-memory broker and a temporary SQLite state store. Run: ``python -m pytest examples``.
"""

from __future__ import annotations

import pytest
from orders_watchers import orders_audit, paid_orders, valid_orders

from sharedstream.core.streamconfig import ManagerSettings
from sharedstream.testing import WatcherHarness

pytestmark = pytest.mark.unit


async def test_paid_orders_become_events_behind_a_watermark() -> None:
    async with WatcherHarness(assets=[paid_orders]) as harness:
        harness.send({"id": 1, "status": "paid", "amount": 10.0})
        harness.send({"id": 2, "status": "open", "amount": 5.0})   # filtered out
        harness.send({"id": 3, "status": "paid", "amount": 7.5})
        await harness.settle()
        assert [e.payload["id"] for e in harness.events("paid_orders")] == [1, 3]
        assert harness.state("paid_orders") == {"last_seen/0": 3}
        assert harness.committed() == {("orders", 0): 3}   # all three acknowledged
        assert harness.rejections() == []


async def test_a_bad_order_is_dead_lettered_with_the_reasons_of_every_watcher() -> None:
    async with WatcherHarness(assets=[valid_orders, paid_orders, orders_audit]) as harness:
        harness.send(b"not json")
        harness.send({"id": 1, "status": "paid"})   # no amount
        await harness.settle()
        bad, unpriced = harness.rejections()
        assert (bad.offset, bad.reasons) == (0, {"valid_orders": "not JSON"})
        assert unpriced.reasons == {"valid_orders": "missing field 'amount'",
                                    "paid_orders": "missing amount"}
        # The audit watcher keeps every message as text: its events are there anyway.
        assert [e.offset for e in harness.events("orders_audit")] == [0, 1]


async def test_a_message_that_fails_twice_is_retried_and_then_recorded() -> None:
    async with WatcherHarness(assets=[paid_orders]) as harness:
        offset = harness.send({"id": 5, "status": "paid", "amount": 1.0}, fail=2)
        await harness.settle()
        retries = [d for d in harness.deliveries if d.offset == offset]
        assert [(d.failed, d.is_retry) for d in retries] == [
            (True, False), (True, True), (False, True)]
        assert [e.payload["id"] for e in harness.events()] == [5]


async def test_a_message_failing_max_attempts_times_becomes_a_rejection() -> None:
    settings = ManagerSettings(max_attempts=3, retry_backoff_initial=0.01,
                               retry_backoff_max=0.02, cohort_grace_period=0.0)
    async with WatcherHarness(assets=[paid_orders], settings=settings) as harness:
        offset = harness.send({"id": 9, "status": "paid", "amount": 1.0}, fail=5)
        await harness.settle()
        assert harness.attempts(offset) == {"paid_orders": 3}
        [rejection] = harness.rejections()
        assert rejection.reasons["paid_orders"].startswith("max attempts: ")
        assert harness.events() == []


async def test_a_replayed_dead_letter_goes_to_the_watcher_that_rejected_it() -> None:
    async with WatcherHarness(assets=[valid_orders, orders_audit]) as harness:
        harness.send({"id": 4, "status": "paid"})   # valid_orders: missing field 'amount'
        await harness.settle()
        [dead] = harness.rejections()
        assert harness.events("valid_orders") == []
        before = len(harness.deliveries)
        harness.replay(dead)   # as `sharedstream dlq replay` would, before any fix
        await harness.settle()
        replayed = harness.deliveries[before:]   # seen at its original offset
        assert [(d.watcher, d.offset) for d in replayed] == [
            ("valid_orders", 0)]   # not orders_audit, which kept it
        [_, again] = harness.rejections()
        assert again.replay_count == 1 and again.offset == dead.offset

"""Where a group whose topic set changed starts each partition (issue 25.4): the decision
alone, from the committed offsets it is given (the broker side is tests/e2e)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from confluent_kafka import KafkaError, KafkaException

from sharedstream.kafka.group_start import GroupAdmin, kafka_reason, left_behind, plan_start
from sharedstream.kafka.progress import decode_progress, encode_progress

NEW = "app.orders+payments"
PARTS = [("orders", 0), ("orders", 1), ("payments", 0)]


def test_each_partition_starts_from_its_own_commit_a_source_or_reset() -> None:
    start = plan_start(NEW, PARTS, {("orders", 1): (7, "")},
                       {"app.orders": {("orders", 0): (40, encode_progress(40, [42]))}},
                       reset="earliest")
    assert [(p.topic, p.partition, p.reason, p.offset) for p in start.partitions] == [
        ("orders", 0, "copied", 40), ("orders", 1, "committed", 7), ("payments", 0, "reset", None)]
    assert decode_progress(40, start.copies()[("orders", 0)][1]) == {42}  # guarantee 7 kept
    assert set(start.copies()) == {("orders", 0)}
    assert start.lines() == [
        "orders partition(s) 1: committed offsets of this group",
        "orders partition(s) 0: continues from group app.orders, where these watchers read "
        "it last (topic set changed)",
        "payments: no committed offset, starts at earliest (auto.offset.reset)"]
    assert start.conflict() is None


def test_sources_at_one_offset_keep_only_progress_every_one_remembers() -> None:
    start = plan_start(NEW, [("orders", 0)], {}, {
        "app.orders": {("orders", 0): (10, encode_progress(10, [11, 12]))},
        "app.orders+refunds": {("orders", 0): (10, encode_progress(10, [12, 13]))}},
        reset="earliest")
    [(offset, metadata)] = start.copies().values()
    assert (offset, set(decode_progress(offset, metadata))) == (10, {12})


def test_sources_that_disagree_refuse_naming_both_and_the_fix() -> None:
    start = plan_start(NEW, [("orders", 0)], {}, {
        "app.orders": {("orders", 0): (10, "")},
        "app.orders+refunds": {("orders", 0): (25, "")}}, reset="earliest")
    assert start.copies() == {}
    problem = start.conflict()
    assert problem is not None
    assert "orders[0]: app.orders at 10, app.orders+refunds at 25" in problem
    assert "sharedstream offsets delete --group app.orders" in problem


def test_a_group_with_live_members_is_not_copied_into() -> None:
    start = plan_start(NEW, [("orders", 0)], {}, {"app.orders": {("orders", 0): (10, "")}},
                       reset="earliest", live_members=1)
    assert start.copies() == {}
    assert "not copied: the group has 1 live member(s)" in start.lines()[0]


def test_left_behind_are_groups_with_commits_nobody_uses() -> None:
    prefixed = {"app.orders": {("orders", 0): (40, "")}, "app.orders+payments": {
        ("orders", 0): (60, "")}, "app.idle": {}}
    assert left_behind(prefixed, ["app.orders+payments"]) == ["app.orders"]


def test_each_watcher_continues_from_the_group_it_was_recorded_in_last() -> None:
    # [orders] -> [orders,payments] -> [payments] -> back: the own commit of payments is
    # stale, the [payments] group read further; orders was last read by the own group.
    t1, t2, t3 = (datetime(2026, 1, 1, hour, tzinfo=UTC) for hour in (1, 2, 3))
    reads = {"reader": {"app.orders": t1, NEW: t2, "app.payments": t3}}
    own = {("orders", 0): (7, ""), ("payments", 0): (3, "")}
    sources = {"app.orders": {("orders", 0): (5, "")},
               "app.payments": {("payments", 0): (4, encode_progress(4, [6]))}}
    start = plan_start(NEW, [("orders", 0), ("payments", 0)], own, sources,
                       reset="earliest", reads=reads)
    assert [(p.reason, p.offset) for p in start.partitions] == [("committed", 7), ("copied", 4)]
    assert decode_progress(4, start.copies()[("payments", 0)][1]) == {6}


def test_watchers_whose_last_groups_disagree_still_refuse() -> None:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    start = plan_start(NEW, [("orders", 0)], {}, {
        "app.orders": {("orders", 0): (10, "")}, "app.orders+refunds": {("orders", 0): (25, "")}},
        reset="earliest", reads={"one": {"app.orders": at},
                                 "two": {"app.orders+refunds": at + timedelta(hours=1)}})
    assert start.conflict() is not None


def test_a_kafka_error_without_text_is_named_and_says_to_try_again() -> None:
    reason = kafka_reason(KafkaException(KafkaError(KafkaError._TRANSPORT, "")))
    assert reason == "_TRANSPORT, no reason given (trying again may help)"
    named = kafka_reason(KafkaException(KafkaError(KafkaError.GROUP_ID_NOT_FOUND)))
    assert named == "GROUP_ID_NOT_FOUND: Broker: The group id does not exist"


def test_a_watcher_moved_into_a_group_others_read_takes_the_groups_position() -> None:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    start = plan_start(NEW, [("orders", 0)], {("orders", 0): (30, "")},
                       {"app.orders": {("orders", 0): (10, "")}}, reset="earliest",
                       reads={"moved": {"app.orders": at}, "stays": {NEW: at}})
    assert [(p.reason, p.offset) for p in start.partitions] == [("committed", 30)]


class _Answer:
    def __init__(self, outcome: object) -> None:
        self.outcome = outcome

    def result(self, timeout: float | None = None) -> object:
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome


class _LoadingCoordinator:
    """An admin client whose broker has just started: the group coordinator answers
    NOT_COORDINATOR, then COORDINATOR_LOAD_IN_PROGRESS, then the listing."""

    def __init__(self, errors: list[int], listing: object) -> None:
        self.errors = errors
        self.listing = listing
        self.calls = 0

    def list_consumer_groups(self, request_timeout: float) -> _Answer:
        self.calls += 1
        if self.errors:
            return _Answer(KafkaException(KafkaError(self.errors.pop(0))))
        return _Answer(self.listing)


def test_a_coordinator_still_loading_is_asked_again_until_the_timeout() -> None:
    from types import SimpleNamespace

    listing = SimpleNamespace(valid=[SimpleNamespace(group_id="app.orders"),
                                     SimpleNamespace(group_id="other")])
    admin = _LoadingCoordinator([KafkaError.NOT_COORDINATOR,
                                 KafkaError.COORDINATOR_LOAD_IN_PROGRESS], listing)
    slept: list[float] = []
    groups = GroupAdmin(admin, timeout=15.0, sleep=slept.append)
    assert groups.groups("app.") == ["app.orders"]
    assert admin.calls == 3 and len(slept) == 2
    # Past the timeout the error is the caller's to word; one that is not retriable at once.
    clock = iter([0.0, 0.0, 20.0, 20.0]).__next__
    late = GroupAdmin(_LoadingCoordinator([KafkaError.NOT_COORDINATOR] * 5, listing),
                      timeout=15.0, clock=clock, sleep=slept.append)
    with pytest.raises(KafkaException):
        late.groups("app.")
    refused = _LoadingCoordinator([KafkaError.GROUP_AUTHORIZATION_FAILED], listing)
    with pytest.raises(KafkaException):
        GroupAdmin(refused, timeout=15.0, sleep=slept.append).groups("app.")
    assert refused.calls == 1

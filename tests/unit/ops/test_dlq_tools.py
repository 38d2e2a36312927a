"""The pure parts of the DLQ tools: header decoding, previews, grouping, replay decisions."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from sharedstream.core.message import Coordinates
from sharedstream.kafka import dlq_headers as h
from sharedstream.ops.dlq.commands import binary_json, group_rows, histograms, preview
from sharedstream.ops.dlq.reader import DeadLetter, decode_dead_letter
from sharedstream.ops.dlq.replay import (
    ORIGINAL,
    REPLAY,
    Action,
    ReplayPlanner,
    ReplayRules,
    ReplaySummary,
    commit_positions,
)

T0 = 1_700_000_000_000


def record(offset: int = 0, *, source_offset: int = 7, count: int = 0,
           rejections: dict[str, str] | None = None, dlq_offset: int | None = None,
           timestamp: int = T0, partition: int = 0) -> DeadLetter:
    headers = h.build_dlq_headers(
        original_headers=[("trace", b"t1")],
        origin=Coordinates("orders", "TID", 2, source_offset, timestamp),
        consumer_group="sharedstream.orders",
        rejections=rejections or {"picky": "no amount"}, replay_count=count)
    return decode_dead_letter("orders.dlq", partition,
                              offset if dlq_offset is None else dlq_offset, timestamp, b"k",
                              b"v", headers)


def test_decodes_every_header() -> None:
    r = record(source_offset=7, count=2, rejections={"b": "x", "a": "y"})
    assert not r.foreign and r.problem is None
    assert r.origin == Coordinates("orders", "TID", 2, 7, T0)
    assert r.identity == "TID:2:7" == r.dedupe_key
    assert r.consumer_group == "sharedstream.orders"
    assert dict(r.rejections) == {"a": "y", "b": "x"} and r.watchers == ("a", "b")
    assert r.replay_count == 2
    assert r.user_headers == [("trace", b"t1")]


def test_records_without_or_with_broken_headers_are_foreign() -> None:
    plain = decode_dead_letter("d", 0, 3, T0, None, b"\xff", [("trace", b"t")])
    assert plain.foreign and plain.problem == "no sharedstream headers"
    assert plain.dedupe_key == "dlq:d:0:3" and plain.identity is None
    good = list(record().headers)
    partial = [(k, v) for k, v in good if k != h.IDENTITY]
    assert decode_dead_letter("d", 0, 0, T0, None, None, partial).problem == (
        f"missing header(s): {h.IDENTITY}")
    bad_json = [(k, b"{" if k == h.REJECTIONS else v) for k, v in good]
    assert decode_dead_letter("d", 0, 0, T0, None, None, bad_json).foreign
    bad_int = [(k, b"x" if k == h.ORIGINAL_OFFSET else v) for k, v in good]
    assert "malformed" in (decode_dead_letter("d", 0, 0, T0, None, None, bad_int).problem or "")
    empty = [(k, b"{}" if k == h.REJECTIONS else v) for k, v in good]
    assert decode_dead_letter("d", 0, 0, T0, None, None, empty).foreign
    assert decode_dead_letter("d", 0, 0, T0, None, None, None).foreign


def test_preview_is_binary_safe_and_bounded() -> None:
    assert preview(None) == "<null>"
    assert preview(b"hello") == "hello"
    assert preview(b"a\nb\x1b[31m") == "a\\nb\\x1b[31m"
    assert preview(b"\x00\xff\xfe") == "hex:00fffe"
    assert preview(b"x" * 100, 10) == "x" * 10 + "… (100 bytes)"
    assert preview(bytes(range(128, 255)), 8).endswith("… (127 bytes)")
    assert binary_json(b"\xff") == {"text": None, "base64": "/w=="}
    assert binary_json(b"ok") == {"text": "ok", "base64": "b2s="}


def test_copies_of_one_rejection_group_into_one_row_and_count_once_in_stats() -> None:
    a, copy = record(0, source_offset=1), record(5, source_offset=1)
    other = record(1, source_offset=2, rejections={"picky": "no amount", "strict": "late"})
    foreign = decode_dead_letter("orders.dlq", 0, 9, T0, None, b"x", None)
    rows = group_rows([a, other, copy, foreign])
    assert [(r.first.offset, r.count, r.dlq_offsets) for r in rows] == [
        (0, 2, [(0, 0), (0, 5)]), (1, 1, [(0, 1)]), (9, 1, [(0, 9)])]
    reasons, watchers = histograms(rows)
    assert reasons == {"no amount": 2, "late": 1, "<foreign>": 1}
    assert watchers == {"picky": 2, "strict": 1}


def rules(**kwargs: object) -> ReplayRules:
    return ReplayRules(parking_topic="orders.dlq.parking", **kwargs)  # type: ignore[arg-type]


def test_replay_keeps_context_and_bumps_the_count() -> None:
    planner = ReplayPlanner(rules())
    d = planner.decide(record(count=1))
    assert d.action is Action.REPLAY and d.topic == "orders.dlq.replay"  # the replay topic
    assert d.headers is not None
    replay = h.parse_replay(d.headers)
    assert replay is not None and replay.replay_count == 2
    assert replay.origin == Coordinates("orders", "TID", 2, 7, T0)
    assert dict(replay.rejections) == {"picky": "no amount"}
    assert h.user_headers(d.headers) == [("trace", b"t1")]
    named = ReplayPlanner(rules(to="scratch")).decide(record())
    assert named.topic == "scratch"
    original = ReplayPlanner(rules(to=ORIGINAL)).decide(record())
    assert original.topic == "orders"


def test_duplicates_are_replayed_once() -> None:
    planner = ReplayPlanner(rules())
    actions = [planner.decide(r).action for r in
               (record(0, source_offset=1), record(1, source_offset=2),
                record(2, source_offset=1))]
    assert actions == [Action.REPLAY, Action.REPLAY, Action.DUPLICATE]
    assert planner.counts == {Action.REPLAY: 2, Action.DUPLICATE: 1}


def test_loop_guard_parks_records_replayed_max_times_unchanged() -> None:
    planner = ReplayPlanner(rules(max_replays=2))
    assert planner.decide(record(0, source_offset=1, count=1)).action is Action.REPLAY
    parked = planner.decide(record(1, source_offset=2, count=2))
    assert parked.action is Action.PARK and parked.topic == "orders.dlq.parking"
    assert parked.headers == list(record(count=2, source_offset=2).headers)
    # A copy of a parked record is one message, one decision.
    assert planner.decide(record(2, source_offset=2, count=2)).action is Action.DUPLICATE
    assert ReplayPlanner(rules(max_replays=0)).decide(record()).action is Action.PARK


def test_filters_select_by_watcher_reason_and_time() -> None:
    two = {"picky": "no amount", "strict": "too late"}
    by_watcher = ReplayPlanner(rules(watchers=frozenset({"strict"})))
    assert by_watcher.decide(record(rejections=two)).action is Action.REPLAY
    assert by_watcher.decide(record(source_offset=8)).action is Action.FILTERED
    by_reason = ReplayPlanner(rules(reasons=("late", "nothing")))
    assert by_reason.decide(record(rejections=two)).action is Action.REPLAY
    assert by_reason.decide(record(source_offset=8)).action is Action.FILTERED
    both = ReplayPlanner(rules(watchers=frozenset({"picky"}), reasons=("late",)))
    assert both.decide(record()).action is Action.FILTERED
    since = datetime.fromtimestamp((T0 + 1000) / 1000, UTC)
    until = datetime.fromtimestamp((T0 + 2000) / 1000, UTC)
    window = ReplayPlanner(rules(since=since, until=until))
    decided = [window.decide(record(source_offset=i, timestamp=T0 + i * 1000)).action
               for i in range(3)]
    assert decided == [Action.FILTERED, Action.REPLAY, Action.FILTERED]


def test_foreign_records_need_an_explicit_target_and_go_unchanged() -> None:
    foreign = decode_dead_letter("orders.dlq", 0, 4, T0, b"k", b"v", [("x", b"1")])
    assert ReplayPlanner(rules()).decide(foreign).action is Action.FOREIGN
    assert ReplayPlanner(rules(to=ORIGINAL)).decide(foreign).action is Action.FOREIGN
    d = ReplayPlanner(rules(to="repair")).decide(foreign)
    assert (d.action, d.topic, d.headers) == (Action.REPLAY, "repair", [("x", b"1")])
    assert rules().to == REPLAY


def test_commit_positions_are_the_next_offset_per_partition() -> None:
    batch = [record(3), record(9, partition=1, source_offset=1), record(4, source_offset=2)]
    assert commit_positions(batch) == {0: 5, 1: 10}


def test_summary_counts_every_action() -> None:
    s = ReplaySummary("t", "g", dry_run=True, examined=3)
    s.counts[Action.PARK] = 2
    out = s.as_dict()
    assert out["parked"] == 2 and out["replayed"] == 0 and out["skipped_duplicates"] == 0
    assert out["dry_run"] is True and out["filtered_out"] == 0
    assert json.loads(json.dumps(out)) == out

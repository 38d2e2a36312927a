"""The bridge's Kafka record (version-1 envelope) and the marker that stops loops."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from sharedstream.airflowbridge.envelope import (
    MARKER,
    Envelope,
    EnvelopeError,
    is_bridged,
    parse_timestamp,
)

EVENT: dict[str, Any] = {"id": 42, "name": "orders", "uri": "s3://bucket/orders",
                         "timestamp": "2026-01-01T10:00:00.123456Z", "extra": {"rows": 7},
                         "asset_id": 3, "source_dag_id": "load"}


def envelope() -> Envelope:
    return Envelope.from_event("team_a", EVENT)


def test_from_an_api_event_to_the_documented_record() -> None:
    record = envelope()
    assert record.key() == b"s3://bucket/orders"
    assert json.loads(record.to_bytes()) == {
        "version": 1, "source": "team_a", "asset": {"name": "orders", "uri": "s3://bucket/orders"},
        "event_id": 42, "timestamp": "2026-01-01T10:00:00.123456Z", "extra": {"rows": 7}}


def test_encoding_is_stable_compact_json() -> None:
    assert envelope().to_bytes() == envelope().to_bytes()
    assert b" " not in envelope().to_bytes()


def test_round_trip() -> None:
    assert Envelope.from_bytes(envelope().to_bytes()) == envelope()


def test_an_event_without_extra_gets_an_empty_one() -> None:
    assert Envelope.from_event("team_a", {**EVENT, "extra": None}).extra == {}
    assert Envelope.from_event("team_a", {k: v for k, v in EVENT.items() if k != "extra"}
                               ).extra == {}


def test_non_ascii_uri_and_extra_survive() -> None:
    record = Envelope.from_event("team_a", {**EVENT, "uri": "s3://b/größe", "extra": {"ä": "ß"}})
    assert record.key() == "s3://b/größe".encode()
    assert Envelope.from_bytes(record.to_bytes()) == record


def _value(**changes: Any) -> bytes:
    data = json.loads(envelope().to_bytes())
    data.update(changes)
    return json.dumps(data).encode()


@pytest.mark.parametrize(("value", "reason"), [
    (None, "tombstone"),
    (b"not json", "not JSON"),
    (b"\xff\xfe", "not JSON"),
    (b"[1, 2]", "not a version-1 bridge envelope"),
    (_value(version=2), "not a version-1 bridge envelope"),
    (_value(asset={"name": "orders"}), "malformed envelope: KeyError"),
    (_value(event_id="forty-two"), "malformed envelope: ValueError"),
    (_value(timestamp="yesterday"), "malformed envelope: ValueError"),
    (_value(extra=[1]), "malformed envelope"),
])
def test_what_is_not_an_envelope_says_why(value: bytes | None, reason: str) -> None:
    with pytest.raises(EnvelopeError, match=reason):
        Envelope.from_bytes(value)


def test_extra_null_decodes_as_empty() -> None:
    assert Envelope.from_bytes(_value(extra=None)).extra == {}


def test_bridged_extra_is_the_source_extra_plus_the_marker() -> None:
    record = envelope()
    assert record.marker() == {"source": "team_a", "event_id": 42}
    assert record.bridged_extra() == {"rows": 7, MARKER: {"source": "team_a", "event_id": 42}}
    assert record.extra == {"rows": 7}  # the envelope itself is unchanged


def test_the_event_the_sink_creates_is_recognised_as_bridged() -> None:
    """Loop prevention: the target's publisher skips what the sink created there."""
    created_in_target = {**EVENT, "id": 900, "extra": envelope().bridged_extra()}
    assert is_bridged(created_in_target)
    assert not is_bridged(EVENT)


@pytest.mark.parametrize("extra", [None, {}, {"rows": 1}, "sharedstream_bridge", [MARKER]])
def test_events_without_the_marker_are_not_bridged(extra: object) -> None:
    assert not is_bridged({**EVENT, "extra": extra})


@pytest.mark.parametrize(("text", "expected"), [
    ("2026-01-01T10:00:00Z", datetime(2026, 1, 1, 10, tzinfo=UTC)),
    ("2026-01-01T10:00:00", datetime(2026, 1, 1, 10, tzinfo=UTC)),
    ("2026-01-01T12:00:00.5+02:00", datetime(2026, 1, 1, 10, 0, 0, 500000, tzinfo=UTC)),
])
def test_timestamps_are_aware_utc(text: str, expected: datetime) -> None:
    parsed = parse_timestamp(text)
    assert parsed == expected and parsed.tzinfo is UTC

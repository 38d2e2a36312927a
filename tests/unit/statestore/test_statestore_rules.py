"""Pure rules: values, advance ordering, retention, durations, settings, staging."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sharedstream.statestore import NEVER_EXPIRE, AssetScope, StateStoreSettings, TaskScope
from sharedstream.statestore.comparison import compare
from sharedstream.statestore.durations import parse_duration
from sharedstream.statestore.retention import resolve_expiry
from sharedstream.statestore.scopes import Writer
from sharedstream.statestore.staging import MISSING, NOT_STAGED, AssetStaging
from sharedstream.statestore.values import ValueTooLargeError, decode_value, encode_value

NOW = datetime(2030, 1, 1, tzinfo=UTC)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children),
    max_leaves=30,
).filter(lambda v: v is not None)


@given(json_values)
def test_encode_decode_round_trip(value: Any) -> None:
    assert decode_value(encode_value("k", value, 10**9)) == value


def test_value_errors() -> None:
    with pytest.raises(ValueError, match="None"):
        encode_value("k", None, 100)
    for bad in ({1: "int key"}, (1, 2), float("nan"), {"a": [set()]}, b"bytes"):
        with pytest.raises(TypeError, match="'the_key'"):
            encode_value("the_key", bad, 100)
    with pytest.raises(ValueTooLargeError, match="max_value_storage_bytes=10"):
        encode_value("k", "é" * 10, 10)  # 22 bytes of UTF-8, counted as bytes
    assert json.loads(encode_value("k", "é" * 4, 10)) == "éééé"


@pytest.mark.parametrize(("new", "old", "expected"), [
    (2, 1, 1), (1, 2, -1), (1, 1.0, 0), (1.5, 1, 1),
    ("b", "a", 1), ("B", "a", -1),
    ("2024-01-01T01:00:00+02:00", "2023-12-31T22:30:00Z", 1),
    ("2024-01-01T00:00:00", "2024-01-01T00:00:00+00:00", 0),
    ("2024-01-02", "2024-01-01T23:59:59Z", 1),
    ([1, 2], [1, 1, 9], 1), ([1], [1, 0], -1), ([], [], 0), (["b", 1], ["a", 9], 1),
])
def test_compare(new: Any, old: Any, expected: int) -> None:
    assert compare(new, old) == expected


@pytest.mark.parametrize(("new", "old"), [
    (1, "1"), ("1", 1), (True, 1), (1, False), ({"a": 1}, {"a": 1}), ([1, 2], [1.0, "x"]),
    ([1], 1),
])
def test_compare_mixed_raises(new: Any, old: Any) -> None:
    with pytest.raises(TypeError):
        compare(new, old)


def test_resolve_expiry() -> None:
    assert resolve_expiry(timedelta(hours=2), 30, NOW) == NOW + timedelta(hours=2)
    assert resolve_expiry(NEVER_EXPIRE, 30, NOW) is None
    assert resolve_expiry(None, 30, NOW) == NOW + timedelta(days=30)
    assert resolve_expiry(None, 0, NOW) is None
    with pytest.raises(ValueError):
        resolve_expiry(None, -1, NOW)
    for bad in (7, 7.0, True, "7d"):
        with pytest.raises(TypeError):
            resolve_expiry(bad, 30, NOW)
    assert repr(NEVER_EXPIRE) == "NEVER_EXPIRE"


def test_parse_duration() -> None:
    assert parse_duration("90s") == timedelta(seconds=90)
    assert parse_duration("1d12h") == timedelta(days=1, hours=12)
    assert parse_duration("2w") == timedelta(weeks=2)
    for bad in ("", "5", "5x", "d", "-1d", "1d 2"):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_settings_validation() -> None:
    assert StateStoreSettings().backend is None  # unset -> default backend
    with pytest.raises(ValueError, match="empty"):
        StateStoreSettings(backend="  ")
    with pytest.raises(ValueError, match="empty"):
        StateStoreSettings(payload_backend="")
    with pytest.raises(ValueError):
        StateStoreSettings(default_retention_days=-1)
    with pytest.raises(ValueError):
        StateStoreSettings(state_cleanup_batch_size=-5)
    with pytest.raises(TypeError):
        StateStoreSettings(max_value_storage_bytes="big")  # type: ignore[arg-type]


def test_scopes() -> None:
    with pytest.raises(ValueError):
        AssetScope()
    with pytest.raises(ValueError):
        AssetScope(name="a", uri="u")
    with pytest.raises(ValueError):
        TaskScope("", "r", "t")
    with pytest.raises(ValueError):
        Writer("robot", "x")  # type: ignore[arg-type]
    assert Writer.task(TaskScope("d", "r", "t", 4)) == Writer("task", "d/r/t/4")


def test_staged_advance_composition() -> None:
    writer = Writer.api()
    staging = AssetStaging()
    assert staging.lookup("k") is NOT_STAGED
    staging.stage_advance("k", 1, "1", writer)
    assert type(staging.ops["k"]).__name__ == "StagedAdvance"
    staging.ops["k"] = staging.ops["k"].__class__(2, "2", writer)
    staging.cleared = True
    assert staging.lookup("other") is MISSING
    staging.stage_advance("other", 5, "5", writer)
    assert type(staging.ops["other"]).__name__ == "StagedSet"  # after a clear: unconditional

"""The cursor-write fast paths (issue 28) give the answers of the general paths they skip."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sharedstream.statestore import AssetScope
from sharedstream.statestore.comparison import compare
from sharedstream.statestore.scopes import Writer
from sharedstream.statestore.staging import (
    MISSING,
    NOT_STAGED,
    StagedAdvance,
    StagedDelete,
    StagedSet,
    StagedWrites,
)
from sharedstream.statestore.values import ValueTooLargeError, encode_value


@given(st.integers())
def test_an_int_encodes_to_its_json(value: int) -> None:
    assert encode_value("k", value, 1_000_000) == json.dumps(value)


def test_an_int_over_the_size_limit_is_refused() -> None:
    assert encode_value("k", 12345, 5) == "12345"
    with pytest.raises(ValueTooLargeError, match="6 bytes, over the limit"):
        encode_value("k", 123456, 5)


def test_bool_is_not_an_int_for_encoding_or_ordering() -> None:
    assert encode_value("k", True, 100) == "true"
    with pytest.raises(TypeError):
        compare(True, 1)
    assert compare(2, 1.5) == 1 and compare(1.5, 2) == -1 and compare(3, 3.0) == 0


def test_staged_writes_are_truthy_only_with_something_staged() -> None:
    scope = AssetScope(asset_id=1)
    staged = StagedWrites()
    assert not staged
    staging = staged.asset(scope)
    assert staged.asset(scope) is staging  # one staging per scope, not replaced
    assert not staged
    staging.stage_advance("k", 1, "1", Writer.api())
    assert staged and len(staged) == 1
    cleared = StagedWrites()
    cleared.asset(scope).cleared = True
    assert cleared


def test_lookup_and_advance_over_each_staged_kind() -> None:
    writer = Writer.api()
    staging = StagedWrites().asset(AssetScope(asset_id=1))
    staging.ops["set"] = StagedSet(1, "1", writer)
    staging.ops["gone"] = StagedDelete()
    assert staging.lookup("set") == 1
    assert staging.lookup("gone") is MISSING
    assert staging.lookup("absent") is NOT_STAGED
    for key in ("set", "gone"):
        staging.stage_advance(key, 9, "9", writer)
        assert type(staging.ops[key]) is StagedSet  # the earlier write was unconditional
    staging.stage_advance("absent", 3, "3", writer)
    staging.stage_advance("absent", 4, "4", writer)
    assert staging.ops["absent"] == StagedAdvance(4, "4", writer)

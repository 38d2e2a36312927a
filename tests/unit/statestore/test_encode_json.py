"""The once-built JSON encoder of stored values and payloads (issue 28: no per-call set-up)
writes the same text as ``JSON_ENCODER.encode`` and refuses the same values."""

from __future__ import annotations

import math
from typing import Any

import pytest

from sharedstream.statestore.values import JSON_ENCODER, encode_json


@pytest.mark.parametrize("value", [
    {"offset": 12, "ts": 1764590000000, "é": "ü\u2028", "q": "a\"b\\c\n"},
    [1.5, -0.0, 10**30, None, True, False, {"nested": [[], {}]}],
    {1: "int key", None: "null key"},
    "text", 7, 2.5, None,
])
def test_the_text_is_json_encoders(value: Any) -> None:
    assert encode_json(value) == JSON_ENCODER.encode(value)


@pytest.mark.parametrize(("value", "error"), [
    (math.nan, ValueError), ({"x": [math.inf]}, ValueError), ({(1, 2): 1}, TypeError),
    ({"x": object()}, TypeError), ({b"k": 1}, TypeError), (b"bytes", TypeError),
])
def test_what_it_refuses(value: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        encode_json(value)


def test_a_value_that_contains_itself_is_refused() -> None:
    looped: list[Any] = []
    looped.append(looped)
    with pytest.raises(RecursionError):
        encode_json(looped)

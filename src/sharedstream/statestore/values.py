"""Validation and JSON encoding of keys and values."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from sharedstream.core.text import lone_surrogate

MAX_KEY_LENGTH = 250

# The one encoding of stored JSON (state values and event payloads). Built once:
# ``json.dumps`` with any non-default option constructs a JSONEncoder per call,
# which was half the cost of encoding a small payload on the unit-of-work path.
# ``encode`` keeps no state between calls, so one instance serves every thread.
JSON_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _one_shot_encoder() -> Callable[[Any], str]:
    """``JSON_ENCODER.encode`` without its per-call set-up.

    ``JSONEncoder.encode`` builds a fresh C encoder (and a Python closure) on every call,
    more than half of the 4 us it takes for a small event payload; this one is built
    once. Same options and same text; no circular-reference markers, so a payload that
    contains itself raises RecursionError instead of ValueError (callers catch both).
    Falls back to ``JSON_ENCODER.encode`` where the C accelerator is missing.
    """
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return JSON_ENCODER.encode
    chunks = make(None, JSON_ENCODER.default, json.encoder.encode_basestring, None,
                  JSON_ENCODER.key_separator, JSON_ENCODER.item_separator, False, False,
                  False)

    def encode(value: Any) -> str:
        return "".join(chunks(value, 0))

    return encode


encode_json = _one_shot_encoder()


class ValueTooLargeError(ValueError):
    """A value's JSON encoding is larger than ``[state_store] max_value_storage_bytes``."""


def check_key(key: object) -> str:
    if not isinstance(key, str):
        raise TypeError(f"state key must be a str, got {type(key).__name__}")
    if not key or len(key) > MAX_KEY_LENGTH:
        raise ValueError(f"state key must be 1..{MAX_KEY_LENGTH} characters, got {len(key)}")
    if (found := lone_surrogate(key)) is not None:
        raise ValueError(f"state key {key!r} is not valid Unicode: lone surrogate {found[1]} "
                         f"at character {found[0]}")
    return key


def _check_json(key: str, value: object, path: str) -> None:
    # json.dumps would accept tuples and non-str dict keys and hand back something else on
    # read; refuse them so that what is read is always what was written.
    if value is None or isinstance(value, bool | str | int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TypeError(f"value of state key {key!r} at {path} is {value}, not JSON")
        return
    if isinstance(value, list):
        for i, item in enumerate(value):
            _check_json(key, item, f"{path}[{i}]")
        return
    if isinstance(value, dict):
        for k, item in value.items():
            if not isinstance(k, str):
                raise TypeError(
                    f"value of state key {key!r} at {path} has a non-str dict key {k!r}"
                )
            _check_json(key, item, f"{path}[{k!r}]")
        return
    raise TypeError(
        f"value of state key {key!r} at {path} is a {type(value).__name__}, not JSON-serialisable"
    )


def encode_value(key: str, value: object, max_bytes: int) -> str:
    """Return the JSON text stored for ``value``; refuse None, non-JSON, text that is not
    valid Unicode (a lone surrogate, which no backend stores) and oversize."""
    if type(value) is int:  # the usual cursor (an offset): its JSON is its ASCII digits
        text = repr(value)
        size = len(text)
    else:
        if value is None:
            raise ValueError(f"state key {key!r}: None is not a storable value; use delete()")
        _check_json(key, value, "$")
        text = encode_json(value)
        if (found := lone_surrogate(text)) is not None:
            raise ValueError(
                f"value of state key {key!r} is not valid Unicode: lone surrogate {found[1]} "
                f"at character {found[0]} of its JSON (decode bytes with errors='replace', "
                "or store base64)")
        size = len(text.encode("utf-8"))
    if size > max_bytes:
        raise ValueTooLargeError(
            f"value of state key {key!r} is {size} bytes, over the limit "
            f"max_value_storage_bytes={max_bytes}"
        )
    return text


def decode_value(text: str) -> Any:
    return json.loads(text)

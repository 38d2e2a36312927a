"""``msg.json`` parses UTF-8 text with a decoder built once (issue 27, decode for less).

The fast path must be invisible: for every value, ``msg.json`` gives what
``json.loads(value)`` gives, and for every value ``json.loads`` refuses, the same
``ValueDecodeError`` reason as before ("not JSON: not UTF-8" or "not JSON: <json's
message>"), which is what the watcher's rejection and the dead letter carry.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sharedstream.core.message import JSON, KafkaMessage, ValueDecodeError

pytestmark = pytest.mark.unit


def expected(value: bytes) -> tuple[str, Any]:
    """What the decode said before the fast path: ``json.loads`` and its error mapping."""
    try:
        return "ok", json.loads(value)
    except UnicodeDecodeError:
        return "error", "not JSON: not UTF-8"
    except ValueError as exc:
        return "error", f"not JSON: {exc}"


def actual(value: bytes) -> tuple[str, Any]:
    """``msg.json`` (its own inline fast path), checked against ``decoded(JSON)``."""
    try:
        found = "ok", KafkaMessage("t", 0, 0, 0, None, value).json
    except ValueDecodeError as exc:
        found = "error", exc.reason
    try:
        general = "ok", KafkaMessage("t", 0, 0, 0, None, value).decoded(JSON)
    except ValueDecodeError as exc:
        general = "error", exc.reason
    assert repr(found) == repr(general)
    return found


EDGES = [
    b'{"id": 1, "status": "paid"}',
    b' {"id": 1}', b'{"id": 1}\n', b'\t[1, 2]\r\n ',  # whitespace around the document
    b'{"id": 1} {"id": 2}', b'{"id": 1}x', b"",  # extra data, nothing at all
    "\ufeff{}".encode(),  # a UTF-8 BOM: json.loads reads it as utf-8-sig
    '{"a": "é"}'.encode("utf-16"), '{"a": 1}'.encode("utf-16-le"),
    '{"a": 1}'.encode("utf-16-be"), "[1]".encode("utf-32"), "7".encode("utf-32-le"),
    b'"\xed\xa0\x80"',  # a lone surrogate: json.loads decodes with surrogatepass
    b"1\x00", b"\x00", b"\xff", b"\xc3", b'{"a": "\x01"}',  # NUL, bad UTF-8, control char
    b"NaN", b"-Infinity", b"1e400", b"1" * 5000,  # json's extensions, int digit limit
    b"[" * 100 + b"]" * 100, b'"\\ud83d\\ude00"', b"nope", b"{", b'{"a":}',
]


@pytest.mark.parametrize("value", EDGES, ids=repr)
def test_the_fast_path_gives_json_loads_result_or_its_error(value: bytes) -> None:
    assert repr(actual(value)) == repr(expected(value))  # repr: NaN is not equal to itself


documents = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12)


@given(documents, st.sampled_from(["utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-32"]),
       st.sampled_from(["", " ", "\n", "x"]))
def test_any_document_in_any_encoding_decodes_as_json_loads_does(
        document: Any, encoding: str, around: str) -> None:
    value = (around + json.dumps(document) + around).encode(encoding, "surrogatepass")
    assert actual(value) == expected(value)


@given(st.binary(max_size=12))
def test_any_bytes_decode_or_fail_as_json_loads_does(value: bytes) -> None:
    assert actual(value) == expected(value)


numbers = st.from_regex(r"-?(0|[1-9][0-9]{0,40})(\.[0-9]{1,40})?([eE][+-]?[0-9]{1,3})?",
                        fullmatch=True)


@given(numbers)
def test_numbers_of_any_length_and_exponent_decode_as_json_loads_does(number: str) -> None:
    """msgspec (the fast path when installed) and json.loads must agree on every number
    both read; one it refuses (out of a float's range) is json.loads's alone."""
    value = f'{{"n": {number}, "l": [{number}]}}'.encode()
    assert repr(actual(value)) == repr(expected(value))


def test_the_fast_path_is_msgspec_when_it_is_installed() -> None:
    from sharedstream.core import message

    assert message._msgspec_decode is not None
    assert message._fast_json(b'{"a": [1, 2.5, "x"]}') == {"a": [1, 2.5, "x"]}
    assert message._fast_json(b"NaN") is message._MISSING  # json.loads's alone: NaN

"""Issue 25.1 at unit level: free text is made storable, exact JSON is refused when it is not
valid Unicode. The real backends are covered by tests/integration/test_text_safety.py."""

from __future__ import annotations

import json

import pytest

from sharedstream.core.message import Coordinates
from sharedstream.core.text import MAX_TEXT_CHARS, lone_surrogate, storable_text
from sharedstream.kafka.dlq_headers import REJECTIONS, build_dlq_headers
from sharedstream.statestore.values import check_key, decode_value, encode_value
from sharedstream.uow.eventrows import PayloadRefused, encode_payload

HOSTILE = ["", "plain", "é😀", "a\x00b", "bad \udcff byte", "\ud83d\ude00 pair of halves",
           "x" * 10_000_000, "\x00" * MAX_TEXT_CHARS, "é" * (MAX_TEXT_CHARS + 1)]


@pytest.mark.parametrize("text", HOSTILE, ids=range(len(HOSTILE)))
def test_storable_text_has_no_nul_encodes_as_utf8_and_is_bounded(text: str) -> None:
    stored = storable_text(text)
    assert "\x00" not in stored
    stored.encode("utf-8")  # raises on a lone surrogate
    assert len(stored) <= MAX_TEXT_CHARS


def test_storable_text_escapes_what_no_backend_takes_and_marks_a_cut() -> None:
    assert storable_text("plain é😀") == "plain é😀"
    assert storable_text("a\x00b \udcff") == "a\\u0000b \\udcff"
    cut = storable_text("x" * 10_000_000)
    assert cut.startswith("x" * (MAX_TEXT_CHARS - 100))
    assert cut.endswith(" [cut: 10000000 characters]")
    # Escaping can lengthen short text past the limit: still cut, still marked.
    assert storable_text("\x00" * 10, limit=40).endswith(" [cut: 10 characters]")


def test_lone_surrogate_finds_the_first_one_only_in_text_utf8_cannot_encode() -> None:
    assert lone_surrogate("ascii") is None
    assert lone_surrogate("é😀\x00") is None
    assert lone_surrogate("ab\udcffc\udc80") == (2, "\\udcff")


def test_a_nul_in_a_state_value_is_escaped_by_json_and_round_trips() -> None:
    text = encode_value("k", {"v": "a\x00b"}, 1000)
    assert "\x00" not in text and decode_value(text) == {"v": "a\x00b"}


def test_a_nul_in_an_event_payload_is_refused_before_any_batch() -> None:
    """Payloads are jsonb on PostgreSQL, which holds no U+0000 (issue 43)."""
    with pytest.raises(PayloadRefused, match="NUL character"):
        encode_payload({"v": "a\x00b"}, 1000)


def test_a_lone_surrogate_in_a_state_value_or_key_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match=r"value of state key 'k' is not valid Unicode: "
                                         r"lone surrogate \\udcff at character 7"):
        encode_value("k", {"v": "a\udcff"}, 1000)
    with pytest.raises(ValueError, match=r"state key .* is not valid Unicode"):
        check_key("last/\udcff")


def test_a_lone_surrogate_in_an_event_payload_is_refused_before_any_batch() -> None:
    with pytest.raises(PayloadRefused, match=r"not valid Unicode: lone surrogate \\udcfe"):
        encode_payload({"text": b"\xfe".decode("utf-8", "surrogateescape")}, 1000)


def test_dead_letter_reasons_are_encodable_and_bounded() -> None:
    headers = build_dlq_headers(
        original_headers=[], origin=Coordinates("t", "id", 0, 5, 1),
        consumer_group="g", replay_count=0,
        rejections={"a": "bad \udcff byte", "b": "x" * 10_000_000, "c": "nul\x00"})
    found = dict(headers)[REJECTIONS]
    assert found is not None
    reasons = json.loads(found)
    assert reasons["a"] == "bad \\udcff byte" and reasons["c"] == "nul\\u0000"
    assert len(reasons["b"]) <= MAX_TEXT_CHARS and len(found) < 3 * MAX_TEXT_CHARS

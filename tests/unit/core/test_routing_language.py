"""The match language's validation: every bad shape is one line naming where and the fix."""

from __future__ import annotations

from typing import Any

import pytest

from sharedstream.core.routing import MatchError, RoutingIndex, compile_match
from sharedstream.core.routing.language import (
    MAX_RULES,
    AnythingBut,
    Clause,
    Exact,
    Exists,
    Prefix,
    Range,
    Selector,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("match", "says"), [
    ({}, "the match is empty: leave match out"),
    ([], "a match is an object"),
    ({"keys": ["a"]}, "unknown field 'keys' at the top of the match"),
    ({"key": "a"}, 'at key: a list of what it may be, not "a" (write ["a"])'),
    ({"key": []}, "at key: an empty list matches nothing"),
    ({"key": [7]}, 'at key: key values are text: write "7", not 7'),
    ({"key": [None]}, '{"exists": false} for none'),
    ({"topic": [{"numeric": [">", 1]}, 1.5]}, "topic values are text"),
    ({"headers": ["x"]}, "at headers: an object of header names"),
    ({"headers": {"h": [3]}}, "at headers.h: header values are text"),
    ({"value": {"s": [{"sufix": "x"}]}}, "at value.s: unknown operator 'sufix' (use prefix"),
    ({"value": {"s": [{"suffix": "x"}]}}, "operator 'suffix' is not supported"),
    ({"value": {"s": [{"prefix": "a", "exists": True}]}}, "an operator object has one operator"),
    ({"value": {"s": [{"prefix": 1}]}}, "prefix takes a text, not 1"),
    ({"value": {"n": [{"numeric": [">", "1"]}]}}, 'numeric bounds are numbers, not "1"'),
    ({"value": {"n": [{"numeric": ["<", 1, ">", 0]}]}}, "a lower bound then an upper one"),
    ({"value": {"n": [{"numeric": [">=", 2, "<", 2]}]}}, "is empty"),
    ({"value": {"n": [{"numeric": ["~", 2]}]}}, "unknown comparison '~'"),
    ({"value": {"n": [{"numeric": [">", 1, "<"]}]}}, "numeric takes"),
    ({"value": {"n": [{"numeric": [">", True]}]}}, "numeric bounds are numbers, not true"),
    ({"value": {"n": [float("nan")]}}, "nan is not a JSON number"),
    ({"value": {"e": [{"exists": "yes"}]}}, 'exists takes true or false, not "yes"'),
    ({"value": {"a": [{"anything-but": []}]}}, "anything-but takes a value or a non-empty list"),
    ({"value": {"a": [{"anything-but": ["x", 1]}]}}, "texts or numbers, not both"),
    ({"value": {"a": [{"anything-but": [True]}]}}, "anything-but takes texts or numbers"),
    ({"value": {"a": [{"anything-but": {"suffix": "x"}}]}}, "anything-but takes a value"),
    ({"value": {"a": [[1]]}}, "a list is not a value to match"),
    ({"value": {}}, "at value: an empty object matches nothing in particular"),
    ({"value": {"$and": []}}, "at value: unknown operator '$and'"),
    ({"$or": []}, "$or takes a non-empty list of objects"),
    ({"$or": ["x"]}, "an alternative is an object"),
    ({"value": {1: ["x"]}}, "field names are text"),
])
def test_a_bad_match_is_one_line_naming_where_and_what(match: Any, says: str) -> None:
    with pytest.raises(MatchError) as raised:
        compile_match(match)
    message = str(raised.value)
    assert says in message
    assert "\n" not in message


def test_the_index_names_the_watcher_of_a_bad_match() -> None:
    with pytest.raises(MatchError, match=r"^match of watcher 'w': at key: key values are text"):
        RoutingIndex({"ok": {"key": ["1"]}, "w": {"key": [1]}})


def test_or_alternatives_multiply_out_and_are_capped() -> None:
    rules = compile_match({"key": ["a"], "$or": [{"topic": ["t"]}, {"value": {"s": ["x"]}}],
                           "headers": {"$or": [{"h": ["1"]}, {"g": ["2"]}]}})
    assert len(rules) == 4
    assert all(rule[0].selector == Selector("header", ("g",)) or
               rule[0].selector == Selector("header", ("h",)) for rule in rules)
    wide = {"$or": [{"key": [str(i)]} for i in range(33)]}
    with pytest.raises(MatchError, match=f"more than {MAX_RULES}"):
        compile_match({**wide, "value": wide})


def test_what_a_match_compiles_to() -> None:
    [rule] = compile_match({
        "key": ["a", "b"],
        "value": {"order": {"status": ["paid"], "total": [{"numeric": [">", 0, "<=", 5]}]},
                  "tag": [{"exists": False}, {"anything-but": {"prefix": "x"}}]},
        "headers": {"h": [{"prefix": "eu"}]},
        "topic": [{"anything-but": ["t"]}]})
    assert set(rule) == {
        Clause(Selector("key"), (Exact("a"), Exact("b"))),
        Clause(Selector("value", ("order", "status")), (Exact("paid"),)),
        Clause(Selector("value", ("order", "total")), (Range(0, True, 5, False),)),
        Clause(Selector("value", ("tag",)), (Exists(False), AnythingBut(frozenset(), "x"))),
        Clause(Selector("header", ("h",)), (Prefix("eu"),)),
        Clause(Selector("topic"), (AnythingBut(frozenset({"t"})),)),
    }
    assert str(Selector("value", ("order", "status"))) == "value.order.status"
    assert str(Selector("header", ("h",))) == "headers.h"


def test_a_list_under_value_matches_the_whole_value() -> None:
    [[clause]] = compile_match({"value": ["ok", 1]})
    assert clause == Clause(Selector("value"), (Exact("ok"), Exact(1)))

"""The routing index against a naive evaluation of each watcher's match.

The oracle below reads the match language's rules straight from the pattern, one
watcher at a time, with none of the index's code: per field, the values a message
offers, then the conditions. Hypothesis draws groups of watchers with matches over a
small alphabet (so values collide, prefixes nest and ranges overlap) and messages over
the same alphabet; the index must route each message to exactly the watchers whose
match the oracle says holds. Each run counts what it exercised, and a test fails when a
kind never happened (a message routed to nobody, to several watchers, through a
residual clause, an array, a non-JSON value, ...).
"""

from __future__ import annotations

import contextlib
import json
import math
import operator
import re
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from sharedstream.core.message import KafkaMessage
from sharedstream.core.routing import RoutingIndex
from sharedstream.core.routing.language import Range
from sharedstream.core.routing.ranges import Ranges

pytestmark = pytest.mark.unit

SEEN: Counter[str] = Counter()
KINDS = ("nobody", "several", "one", "prefix", "numeric", "exists false", "anything-but",
         "$or", "array", "not JSON", "residual", "direct", "text number")
EXAMPLES = [0]

# -- the oracle -------------------------------------------------------------------------

OBJ = object()
NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?\Z")


def wants(match: dict[str, Any], msg: KafkaMessage) -> bool:
    """Whether ``match`` holds for ``msg``, read from the pattern directly."""
    for name, sub in match.items():
        if name == "$or":
            if not any(wants(alt, msg) for alt in sub):
                return False
        elif name == "topic":
            if not leaf(sub, [msg.topic], text=True):
                return False
        elif name == "key":
            if not leaf(sub, utf8([msg.key]), text=True):
                return False
        elif name == "headers":
            if not headers_hold(sub, msg):
                return False
        elif name == "value":
            try:
                doc = msg.json if msg.value is not None else None
                decoded = msg.value is not None
            except ValueError:
                decoded = False
            if isinstance(sub, dict):
                if not fields_hold(sub, doc if decoded else None, decoded):
                    return False
            elif not leaf(sub, flat_leaf(doc) if decoded else [], text=False):
                return False
    return True


def utf8(raw: list[bytes | None]) -> list[Any]:
    out = []
    for b in raw:
        if b is None:
            continue
        with contextlib.suppress(UnicodeDecodeError):
            out.append(b.decode("utf-8"))
    return out


def headers_hold(pattern: dict[str, Any], msg: KafkaMessage) -> bool:
    for name, sub in pattern.items():
        if name == "$or":
            if not any(headers_hold(alt, msg) for alt in sub):
                return False
            continue
        values: list[Any] = []
        for h, v in msg.headers:
            if h == name:
                if v is None:
                    values.append(None)
                else:
                    values.extend(utf8([v]))
        if not leaf(sub, values, text=True):
            return False
    return True


def fields_hold(pattern: dict[str, Any], doc: Any, decoded: bool,
                path: tuple[str, ...] = ()) -> bool:
    for name, sub in pattern.items():
        if name == "$or":
            if not any(fields_hold(alt, doc, decoded, path) for alt in sub):
                return False
        elif isinstance(sub, dict):
            if not fields_hold(sub, doc, decoded, (*path, name)):
                return False
        elif not leaf(sub, at(doc, (*path, name)) if decoded else [], text=False):
            return False
    return True


def at(node: Any, path: tuple[str, ...]) -> list[Any]:
    if not path:
        return flat_leaf(node)
    if isinstance(node, list):
        return [v for element in node for v in at(element, path)]
    if isinstance(node, dict) and path[0] in node:
        return at(node[path[0]], path[1:])
    return []


def flat_leaf(node: Any) -> list[Any]:
    if isinstance(node, list):
        return [v for element in node for v in flat_leaf(element)]
    return [OBJ if isinstance(node, dict) else node]


def leaf(conditions: list[Any], values: list[Any], text: bool) -> bool:
    return any(holds(c, values, text) for c in conditions)


def same(v: Any, want: Any) -> bool:
    if isinstance(want, bool) or want is None:
        return v is want
    if isinstance(want, str):
        return isinstance(v, str) and v == want
    return isinstance(v, int | float) and not isinstance(v, bool) and v == want


def as_number(v: Any, text: bool) -> float | None:
    if isinstance(v, int | float) and not isinstance(v, bool):
        return v
    if text and isinstance(v, str) and NUMBER.match(v):
        return float(v)
    return None


def holds(condition: Any, values: list[Any], text: bool) -> bool:
    if not isinstance(condition, dict):
        return any(same(v, condition) for v in values)
    [(op, arg)] = condition.items()
    if op == "exists":
        return bool(values) == arg
    if op == "prefix":
        return any(isinstance(v, str) and v.startswith(arg) for v in values)
    if op == "numeric":
        return any(x is not None and in_range(arg, x) for x in (as_number(v, text) for v in values))
    assert op == "anything-but"
    if isinstance(arg, dict):
        return any(not (isinstance(v, str) and v.startswith(arg["prefix"])) for v in values)
    excluded = arg if isinstance(arg, list) else [arg]
    return any(not any(same(v, x) for x in excluded) for v in values)


def in_range(spec: list[Any], x: float) -> bool:
    ops = {"=": operator.eq, "<": operator.lt, "<=": operator.le, ">": operator.gt,
           ">=": operator.ge}
    return all(ops[op](x, n) for op, n in zip(spec[::2], spec[1::2], strict=True))


# -- strategies ----------------------------------------------------------------------------

TEXT = st.sampled_from(["a", "ab", "abc", "b", "1", "10", "2.5", "-3", ""])
NUM = st.sampled_from([0, 1, 2, 2.5, -3, 10, 1.0])
SCALAR = st.one_of(TEXT, NUM, st.booleans(), st.none())
FIELDS = ("s", "n", "o")


def numeric() -> st.SearchStrategy[dict[str, Any]]:
    lower = st.tuples(st.sampled_from([">", ">="]), NUM)
    upper = st.tuples(st.sampled_from(["<", "<="]), NUM)
    one = st.one_of(st.tuples(st.just("="), NUM), lower, upper).map(list)
    two = st.tuples(lower, upper).filter(
        lambda p: p[0][1] < p[1][1] or (p[0][1] == p[1][1] and p[0][0] == ">=" and p[1][0] == "<="))
    return st.one_of(one, two.map(lambda p: [*p[0], *p[1]])).map(lambda spec: {"numeric": spec})


def conditions(text: bool) -> st.SearchStrategy[list[Any]]:
    exact = TEXT if text else SCALAR
    but_values = st.one_of(st.lists(TEXT, min_size=1, max_size=3), TEXT,
                           *(() if text else (st.lists(NUM, min_size=1, max_size=3), NUM)))
    condition = st.one_of(
        exact, exact,
        TEXT.map(lambda p: {"prefix": p}),
        numeric(),
        st.booleans().map(lambda b: {"exists": b}),
        but_values.map(lambda v: {"anything-but": v}),
        TEXT.map(lambda p: {"anything-but": {"prefix": p}}))
    return st.lists(condition, min_size=1, max_size=3)


def value_pattern(depth: int) -> st.SearchStrategy[dict[str, Any]]:
    sub = (conditions(False) if depth >= 1
           else st.one_of(conditions(False), value_pattern(depth + 1)))
    base = st.dictionaries(st.sampled_from(FIELDS), sub, min_size=1, max_size=2)
    return st.one_of(base, st.tuples(base, st.lists(base, min_size=1, max_size=2)).map(
        lambda p: {**p[0], "$or": p[1]}))


@st.composite
def matches(draw: st.DrawFn) -> dict[str, Any]:
    parts: dict[str, Any] = {}
    for name in draw(st.lists(st.sampled_from(["topic", "key", "headers", "value"]),
                              min_size=1, max_size=3, unique=True)):
        if name == "headers":
            parts[name] = draw(st.dictionaries(st.sampled_from(["h", "g"]), conditions(True),
                                               min_size=1, max_size=2))
        elif name == "value":
            parts[name] = draw(st.one_of(value_pattern(0), conditions(False)))
        else:
            parts[name] = draw(conditions(True))
    if draw(st.integers(0, 4)) == 0:
        parts["$or"] = [draw(matches()), draw(matches())]
    return parts


def documents(depth: int = 0) -> st.SearchStrategy[Any]:
    if depth >= 2:
        return SCALAR
    sub = documents(depth + 1)
    return st.one_of(SCALAR, st.lists(sub, max_size=3),
                     st.dictionaries(st.sampled_from(FIELDS), sub, max_size=3))


@st.composite
def messages(draw: st.DrawFn) -> KafkaMessage:
    key = draw(st.one_of(st.none(), TEXT.map(str.encode), st.just(b"\xff")))
    value = draw(st.one_of(st.none(), st.just(b"{not json"),
                           documents().map(lambda d: json.dumps(d).encode())))
    headers = tuple(draw(st.lists(st.tuples(st.sampled_from(["h", "g"]), st.one_of(
        st.none(), TEXT.map(str.encode), st.just(b"\xfe"))), max_size=3)))
    return KafkaMessage(draw(st.sampled_from(["t", "u"])), 0, 0, 0, key, value, headers)


def keyed(n: int) -> dict[str, Any]:
    return {f"w{i}": {"key": [str(i)]} for i in range(n)}


# -- the property -------------------------------------------------------------------------


def msg(value: bytes | None, key: bytes | None = None, topic: str = "t") -> KafkaMessage:
    return KafkaMessage(topic, 0, 0, 0, key, value, ())


# Hypothesis draws at random; these explicit cases run every time, so each kind the
# last test asks for happens in every run, not only in most.
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example({"w0": {"key": ["0"]}, "w1": {"key": ["1"]}}, [msg(b"{}", b"0"), msg(b"{}", b"9")])
@example({"w0": {"key": [{"prefix": "a"}]}, "w1": {"key": [{"prefix": "ab"}]}},
         [msg(b"{}", b"abc")])
@example({"w0": {"value": {"n": [{"numeric": [">", 0]}]}},
          "w1": {"value": {"s": [{"exists": False}]}}},
         [msg(b'{"n": 5}'), msg(b"{not json")])
@example({"w0": {"topic": [{"anything-but": "u"}], "key": ["k"]},
          "w1": {"$or": [{"key": ["a"]}, {"topic": ["t"]}]}},
         [msg(b"{}", b"k")])
@example({"w0": {"value": [{"numeric": [">", 0]}]}, "w1": {"key": [{"numeric": ["=", 5]}]}},
         [msg(b"[1, 2]", b"5")])
@given(st.dictionaries(st.sampled_from([f"w{i}" for i in range(8)]),
                       st.one_of(st.none(), matches(), matches()), min_size=1, max_size=8),
       st.lists(messages(), min_size=1, max_size=12))
def test_the_index_routes_as_each_match_says(group: dict[str, Any],
                                             batch: list[KafkaMessage]) -> None:
    index = RoutingIndex(group)
    assert index.everyone == {w for w, m in group.items() if m is None}
    shares, unrouted, several = index.route_all(batch)
    for i, msg in enumerate(batch):
        expected = {w for w, m in group.items() if m is not None and wants(m, msg)}
        routed = index.route(msg)
        assert len(routed) == len(set(routed)), routed
        assert set(routed) == expected, (msg, group)
        assert {w for w, (positions, _) in shares.items() if i in positions} == expected
        note(expected, msg, group, index)
    for positions, routed in shares.values():
        assert positions == sorted(set(positions))
        assert routed == [batch[i] for i in positions]
    assert unrouted == sum(1 for i in range(len(batch))
                           if not any(i in positions for positions, _ in shares.values()))
    assert several == any(len(positions) > 1 for positions, _ in shares.values())
    EXAMPLES[0] += 1


def note(expected: set[str], msg: KafkaMessage, group: dict[str, Any], index: RoutingIndex) -> None:
    text = json.dumps(group)
    kinds = {"nobody": not expected, "several": len(expected) > 1, "one": len(expected) == 1,
             "prefix": '"prefix"' in text and bool(expected), "numeric": '"numeric"' in text,
             "exists false": '"exists": false' in text, "anything-but": "anything-but" in text,
             "$or": "$or" in text, "array": msg.value is not None and msg.value.startswith(b"["),
             "not JSON": msg.value == b"{not json" and bool(expected),
             "residual": any(r.residual for r in index._rules) and bool(expected),
             "direct": index._direct is not None and bool(expected),
             "text number": '"numeric"' in text and ('"key"' in text or '"headers"' in text)}
    for kind, happened in kinds.items():
        if happened:
            SEEN[kind] += 1
            event(kind)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 50), st.lists(st.integers(-5, 60), min_size=1, max_size=30))
def test_one_lookup_routes_a_watcher_per_key(n: int, keys: list[int]) -> None:
    index = RoutingIndex(keyed(n))
    assert index._direct is not None  # the one-lookup table
    for k in keys:
        msg = KafkaMessage("t", 0, 0, 0, str(k).encode(), b"{}", ())
        assert index.route(msg) == ((f"w{k}",) if 0 <= k < n else ())
        SEEN["direct"] += 1
    batch = [KafkaMessage("t", 0, i, 0, str(k).encode(), b"{}", ()) for i, k in enumerate(keys)]
    shares, unrouted, several = index.route_all(batch)  # the table's batch path agrees with route
    assert shares == {name: ([i for i, m in enumerate(batch) if index.route(m) == (name,)],
                             [m for m in batch if index.route(m) == (name,)])
                      for name in {n for m in batch for n in index.route(m)}}
    assert unrouted == sum(1 for m in batch if not index.route(m))
    assert several == any(len(positions) > 1 for positions, _ in shares.values())


def test_one_lookup_reads_a_message_without_the_field_as_none() -> None:
    class Bare:  # an object a producer might hand over with no ``key`` attribute
        topic = "t"

    index = RoutingIndex({"w0": {"key": ["0"]}, "w1": {"key": ["1"]}})
    keyed_msg = KafkaMessage("t", 0, 0, 0, b"1", b"{}", ())
    assert index.route_all([Bare(), keyed_msg, Bare()]) == ({"w1": ([1], [keyed_msg])}, 2, False)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(numeric(), st.integers(0, 5)), min_size=1, max_size=40),
       st.lists(st.one_of(NUM, st.floats(-20, 20)), min_size=1, max_size=20))
def test_ranges_find_exactly_the_ranges_containing_a_number(
        specs: list[tuple[dict[str, Any], int]], xs: list[float]) -> None:
    from sharedstream.core.routing.language import compile_match
    ranges: list[tuple[Range, int]] = []
    for spec, rule in specs:
        [[clause]] = compile_match({"value": [spec]})
        ranges.append((clause.conditions[0], rule))
    tree = Ranges(ranges)
    for x in xs:
        found: list[int] = []
        tree.stab(x, found)
        assert sorted(found) == sorted(rule for r, rule in ranges if r.contains(x)), x
        assert sorted(found) == sorted(rule for (spec, rule) in specs
                                       if in_range(spec["numeric"], x))


def test_ranges_open_at_both_ends_of_adjacent_numbers_hold_nothing() -> None:
    low = 1.0
    high = math.nextafter(low, 2.0)
    tree = Ranges([(Range(low, True, high, True), 0), (Range(0, False, 5, False), 1)])
    found: list[int] = []
    tree.stab(low, found)
    assert found == [1]


def test_every_kind_was_exercised() -> None:
    if not EXAMPLES[0]:
        test_the_index_routes_as_each_match_says()
    missing = [kind for kind in KINDS if not SEEN[kind]]
    assert not missing, f"never exercised: {missing} ({dict(SEEN)})"

"""One group's matches compiled into one index: who wants a message, found by lookup.

:class:`RoutingIndex` takes every watcher's match (None: the watcher takes everything)
and compiles their rules (:func:`~sharedstream.core.routing.language.compile_match`)
into per-selector postings. Each rule is filed under one *anchor* clause, the one
cheapest to look up (exact values first, then prefix, numeric, exists, anything-but; a
key, topic or header before a field of the value, which needs the JSON decode); its
other clauses are *residual*, checked only when the anchor found the rule.

Per message, :meth:`RoutingIndex.route` reads each anchor selector once, looks its
values up, and checks the residual clauses of the rules found, reading each of their
selectors at most once more (a per-message cache). Nothing walks the watchers: the
cost is O(selectors + rules found), and a rule is found only when its anchor holds.

Cost of each operator, where it is an anchor (v: the values a selector offers, usually
one; r: the rules anchored on the selector):

* exact values and sets: one dict lookup per value, O(1 + rules found). A group whose
  rules are all single exact-text clauses on one text selector (a watcher per key, say)
  routes a message with one lookup of its raw key bytes, nothing decoded;
* prefix: one dict lookup per distinct prefix length not longer than the value,
  O(lengths + rules found);
* numeric ranges: a centred interval tree, O(log r + rules found)
  (:mod:`~sharedstream.core.routing.ranges`); exact numbers are the dict's;
* exists: a list, O(rules found); ``{"exists": false}`` is found when the selector
  offers nothing;
* anything-but: each such rule is tested, O(rules anchored on anything-but): it matches
  everything but what it lists, so what it costs is mostly what it finds.

A residual clause costs what its own conditions do (a set or prefix test per value). A
field of the value is read from ``KafkaMessage.json``, shared with every watcher's own
decode, and only when some anchor or residual clause asks for it.

Built once per group when its cohort is known (O(rules)); a membership change rebuilds
it. Failure window: none; routing is pure and in memory.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from itertools import count
from operator import attrgetter
from typing import Any

from sharedstream.core.routing.language import (
    AnythingBut,
    Clause,
    Condition,
    Exact,
    Exists,
    MatchError,
    Prefix,
    Range,
    Rule,
    Selector,
    compile_match,
)
from sharedstream.core.routing.ranges import Ranges
from sharedstream.core.routing.readers import OBJECT, Values, read_selector, text_number

NOBODY: tuple[str, ...] = ()


def condition_holds(condition: Condition, values: Values, text: bool) -> bool:
    """Whether ``condition`` holds for what a selector offered (any of ``values``)."""
    if isinstance(condition, Exists):
        return bool(values) is condition.present
    if isinstance(condition, Exact):
        want = condition.value
        return any(_same(v, want) for v in values)
    if isinstance(condition, Prefix):
        prefix = condition.prefix
        return any(type(v) is str and v.startswith(prefix) for v in values)
    if isinstance(condition, Range):
        return any(x is not None and condition.contains(x)
                   for x in (_number_of(v, text) for v in values))
    return any(_not_excluded(condition, v) for v in values)


def _same(v: Any, want: Any) -> bool:
    if type(want) is str:
        return type(v) is str and v == want
    if want is None or type(want) is bool:
        return v is want
    return (type(v) is int or type(v) is float) and v == want


def _number_of(v: Any, text: bool) -> float | int | None:
    if type(v) is int or type(v) is float:
        return v
    if text and type(v) is str:
        return text_number(v)
    return None


def _not_excluded(condition: AnythingBut, v: Any) -> bool:
    if condition.prefix is not None:
        return not (type(v) is str and v.startswith(condition.prefix))
    return not any(_same(v, x) for x in condition.values)


Predicate = Callable[[Values], bool]


def clause_predicate(clause: Clause) -> Predicate:
    """A test of what a selector offered against a clause, compiled once (a set test
    for the usual clause of exact texts)."""
    conditions, text = clause.conditions, clause.selector.is_text
    if all(isinstance(c, Exact) and isinstance(c.value, str) for c in conditions):
        wanted = frozenset(c.value for c in conditions)  # type: ignore[union-attr]

        def exact_text(values: Values) -> bool:
            for v in values:  # noqa: SIM110 (a loop: no generator per message)
                if type(v) is str and v in wanted:
                    return True
            return False
        return exact_text
    if len(conditions) == 1:
        [condition] = conditions
        return lambda values: condition_holds(condition, values, text)
    return lambda values: any(condition_holds(c, values, text) for c in conditions)


class _Rule:
    __slots__ = ("names", "residual", "watcher")

    def __init__(self, watcher: str, residual: tuple[Clause, ...]) -> None:
        self.watcher = watcher
        self.names = (watcher,)
        self.residual = tuple((clause.selector, clause_predicate(clause)) for clause in residual)


class _Postings:
    """The rules anchored on one selector, by what their anchor clause looks for."""

    __slots__ = ("absent", "but", "exact", "exact_bool", "exact_num", "null", "prefix_lengths",
                 "prefixes", "present", "ranges", "text")

    def __init__(self, text: bool) -> None:
        self.text = text
        self.exact: dict[str, list[int]] = {}
        self.exact_num: dict[float, list[int]] = {}
        self.exact_bool: dict[bool, list[int]] = {}
        self.null: list[int] = []
        self.prefixes: dict[int, dict[str, list[int]]] = {}
        self.prefix_lengths: list[int] = []
        self.ranges: Ranges | None = None
        self.present: list[int] = []
        self.absent: list[int] = []
        self.but: list[tuple[int, AnythingBut]] = []

    def add(self, condition: Condition, rule: int, ranges: list[tuple[Range, int]]) -> None:
        if isinstance(condition, Exact):
            value = condition.value
            if value is None:
                self.null.append(rule)
            elif isinstance(value, str):
                self.exact.setdefault(value, []).append(rule)
            elif isinstance(value, bool):
                self.exact_bool.setdefault(value, []).append(rule)
            else:
                self.exact_num.setdefault(value, []).append(rule)
        elif isinstance(condition, Prefix):
            prefix = condition.prefix
            self.prefixes.setdefault(len(prefix), {}).setdefault(prefix, []).append(rule)
        elif isinstance(condition, Range):
            ranges.append((condition, rule))
        elif isinstance(condition, Exists):
            (self.present if condition.present else self.absent).append(rule)
        else:
            self.but.append((rule, condition))

    def collect(self, values: Values, out: list[int]) -> None:
        """Append the rules whose anchor holds for ``values``."""
        if not values:
            out.extend(self.absent)
            return
        out.extend(self.present)
        exact, lengths, ranges = self.exact, self.prefix_lengths, self.ranges
        for v in values:
            t = type(v)
            if t is str:
                hit = exact.get(v)
                if hit:
                    out.extend(hit)
                if lengths:
                    n = len(v)
                    for length in lengths:
                        if length > n:
                            break
                        hit = self.prefixes[length].get(v[:length])
                        if hit:
                            out.extend(hit)
                if ranges is not None and self.text:
                    x = text_number(v)
                    if x is not None:
                        ranges.stab(x, out)
            elif t is int or t is float:
                hit = self.exact_num.get(v)
                if hit:
                    out.extend(hit)
                if ranges is not None:
                    ranges.stab(v, out)
            elif t is bool:
                hit = self.exact_bool.get(v)
                if hit:
                    out.extend(hit)
            elif v is None:
                out.extend(self.null)
        for rule, condition in self.but:
            for v in values:
                if _not_excluded(condition, v):
                    out.append(rule)
                    break


# Cheapest anchor first: how selective (and cheap to look up) a clause's conditions are.
_RANK = {Exact: 0, Prefix: 1, Range: 2, AnythingBut: 4}


def _rank(clause: Clause) -> tuple[int, int, int]:
    worst = max(_RANK[type(c)] if type(c) is not Exists else (3 if c.present else 5)
                for c in clause.conditions)
    return (worst, not clause.selector.is_text, len(clause.conditions))


class RoutingIndex:
    """Every watcher's match of one group, compiled (see the module docstring).

    ``matches`` maps each watcher to its match, or to None for a watcher that takes
    everything (:attr:`everyone`); ``compiled`` may give matches already compiled
    (``compile_match``), by watcher. Raises :class:`MatchError` (naming the watcher) for
    an invalid match.
    """

    __slots__ = ("_anchors", "_direct", "_direct_attr", "_direct_reader", "_readers", "_rules",
                 "everyone", "routed", "selectors")

    def __init__(self, matches: Mapping[str, Any],
                 compiled: Mapping[str, tuple[Rule, ...]] | None = None) -> None:
        self.everyone = frozenset(name for name, match in matches.items() if match is None)
        self.routed = frozenset(matches) - self.everyone
        self._rules: list[_Rule] = []
        postings: dict[Selector, _Postings] = {}
        ranges: dict[Selector, list[tuple[Range, int]]] = {}
        known = compiled or {}
        for name in sorted(self.routed):
            rules = known.get(name)
            if rules is None:
                try:
                    rules = compile_match(matches[name])
                except MatchError as exc:
                    raise MatchError(f"match of watcher {name!r}: {exc}") from None
            for clauses in rules:
                anchor = min(clauses, key=_rank)
                rule = len(self._rules)
                self._rules.append(_Rule(name, tuple(c for c in clauses if c is not anchor)))
                selector = anchor.selector
                found = postings.get(selector)
                if found is None:
                    found = postings[selector] = _Postings(selector.is_text)
                for condition in anchor.conditions:
                    found.add(condition, rule, ranges.setdefault(selector, []))
        for selector, items in ranges.items():
            if items:
                postings[selector].ranges = Ranges(items)
        for found in postings.values():
            found.prefix_lengths = sorted(found.prefixes)
        self.selectors = frozenset(
            {*postings, *(selector for r in self._rules for selector, _ in r.residual)})
        self._readers = {selector: read_selector(selector) for selector in self.selectors}
        self._anchors = [(selector, self._readers[selector], found)
                         for selector, found in sorted(postings.items())]
        self._direct: dict[Any, tuple[str, ...]] | None = None
        self._direct_reader: Callable[[Any], Any] | None = None
        self._direct_attr: Callable[[Any], Any] | None = None
        self._compile_direct()

    def _compile_direct(self) -> None:
        """One lookup per message when every rule is an exact-text clause alone on one
        text selector: a table from the selector's raw value to the watchers."""
        if len(self._anchors) != 1 or any(rule.residual for rule in self._rules):
            return
        selector, _, found = self._anchors[0]
        if not selector.is_text or selector.kind == "header" or (
                found.exact_num or found.exact_bool or found.null or found.prefixes
                or found.ranges or found.present or found.absent or found.but):
            return
        table: dict[Any, tuple[str, ...]] = {}
        encode = selector.kind == "key"  # keys are compared as their UTF-8 bytes
        for value, rules in found.exact.items():
            names = tuple(dict.fromkeys(self._rules[r].watcher for r in rules))
            table[value.encode("utf-8") if encode else value] = (
                self._rules[rules[0]].names if len(names) == 1 else names)
        self._direct = table
        self._direct_reader = _key_bytes if encode else _topic
        self._direct_attr = attrgetter("key" if encode else "topic")

    def route(self, message: Any) -> tuple[str, ...]:
        """The watchers with a match that ``message`` satisfies (not :attr:`everyone`),
        each once."""
        direct = self._direct
        if direct is not None:
            return direct.get(self._direct_reader(message), NOBODY)  # type: ignore[misc]
        rules = self._rules
        cache: dict[Selector, Values] = {}
        found: list[int] = []
        for selector, reader, postings in self._anchors:
            values = cache[selector] = reader(message)
            postings.collect(values, found)
        if not found:
            return NOBODY
        names: dict[str, None] = {}
        for rule_id in found:
            rule = rules[rule_id]
            if rule.watcher in names:
                continue
            if rule.residual and not self._residual_holds(rule, message, cache):
                continue
            names[rule.watcher] = None
        if len(names) == 1:
            return rules[found[0]].names if rules[found[0]].watcher in names else tuple(names)
        return tuple(names)

    def route_all(self, messages: Sequence[Any]
                  ) -> tuple[dict[str, tuple[list[int], list[Any]]], int, bool]:
        """Per routed watcher, the positions in ``messages`` it wants and those messages
        (in order); how many messages no routed watcher wants; and whether a watcher
        wants more than one of them (else each wants exactly one: counted in C)."""
        direct = self._direct
        if direct is not None:
            return self._route_all_direct(messages, direct)
        shares: dict[str, tuple[list[int], list[Any]]] = {}
        route = self.route
        unrouted = 0
        several = False
        for i, message in enumerate(messages):
            names = route(message)
            if not names:
                unrouted += 1
                continue
            for name in names:
                share = shares.get(name)
                if share is None:
                    shares[name] = ([i], [message])
                else:
                    share[0].append(i)
                    share[1].append(message)
                    several = True
        return shares, unrouted, several

    def _route_all_direct(self, messages: Sequence[Any], table: dict[Any, tuple[str, ...]]
                          ) -> tuple[dict[str, tuple[list[int], list[Any]]], int, bool]:
        """:meth:`route_all` by the one-lookup table: each message's raw value read and
        looked up in C (``attrgetter``, ``map``), Python only per message routed."""
        try:
            values = list(map(self._direct_attr, messages))  # type: ignore[arg-type]
        except AttributeError:  # a message without the attribute: as ``route`` reads it
            values = list(map(self._direct_reader, messages))  # type: ignore[arg-type]
        shares: dict[str, tuple[list[int], list[Any]]] = {}
        found = shares.get
        routed = 0
        several = False
        for i, message, names in zip(count(), messages, map(table.get, values)):
            if names is None:
                continue
            routed += 1
            for name in names:
                share = found(name)
                if share is None:
                    shares[name] = ([i], [message])
                else:
                    share[0].append(i)
                    share[1].append(message)
                    several = True
        return shares, len(messages) - routed, several

    def _residual_holds(self, rule: _Rule, message: Any, cache: dict[Selector, Values]) -> bool:
        for selector, holds in rule.residual:
            values = cache.get(selector)
            if values is None:
                values = cache[selector] = self._readers[selector](message)
            if not holds(values):
                return False
        return True


def _key_bytes(message: Any) -> Any:
    return getattr(message, "key", None)


def _topic(message: Any) -> Any:
    return getattr(message, "topic", None)


__all__ = ["NOBODY", "OBJECT", "RoutingIndex", "condition_holds", "read_selector",
           "text_number"]

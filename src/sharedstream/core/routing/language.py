"""The match language: what a watcher wants, declared as data, and its validation.

A match is a JSON object in the style of EventBridge event patterns (aws/event-ruler),
so that users meet a language they already know. Its top-level fields name what a
message is read by (its *selectors*):

* ``"topic"``: the topic the message was read from (text);
* ``"key"``: the key as UTF-8 text (a null key, or one that is not UTF-8, is absent);
* ``"headers"``: an object of header names, each read as UTF-8 text (a header that
  repeats offers each of its values);
* ``"value"``: the value parsed as JSON (``KafkaMessage.json``, the one decode every
  watcher of the group shares); an object descends into fields
  (``{"value": {"order": {"status": ["paid"]}}}`` reads ``value.order.status``), a list
  matches the whole value. A list met on the way is looked into element by element
  (EventBridge's arrays); a value that is not JSON, or a tombstone, has no fields.

A field's list says what it may be (any of them: *or*); several fields must all match
(*and*); ``"$or": [match, ...]`` at any level takes the alternatives. In a list:

==========================================  ===================================================
``"paid"``, ``42``, ``true``, ``null``      exactly this value (a number equals the same number:
                                            ``1`` and ``1.0``; never ``true``). Key, topic and
                                            header values are text: ``"7"``, not ``7``
``{"prefix": "eu-"}``                       text starting with it
``{"numeric": [">=", 10, "<", 20]}``        a number in the range (``=``, ``<``, ``<=``, ``>``,
                                            ``>=``: one bound, two, or ``=``); key, topic and
                                            header text is read as a number when it is one
``{"exists": true}`` / ``false``            the field is there / is not
``{"anything-but": ["test", "dev"]}``       present and none of these (a value, a list of
                                            values, or ``{"prefix": ...}``)
==========================================  ===================================================

:func:`compile_match` validates a match (one-line :class:`MatchError` naming where and
what, never a traceback) and rewrites it into *rules*: the alternatives of its ``$or``s
multiplied out, each a conjunction of *clauses* ``(selector, conditions)``. The index
(:mod:`sharedstream.core.routing.index`) compiles the rules of every watcher of a group
into one structure. Validation runs at start-up and in ``sharedstream check``, never per
message.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from itertools import product
from typing import Any, NamedTuple

TEXT_SELECTORS = ("topic", "key", "headers")
SELECTORS = (*TEXT_SELECTORS, "value")
OPERATORS = ("prefix", "numeric", "exists", "anything-but")
# EventBridge operators this language does not take (yet): named, so the error says so.
UNSUPPORTED = ("suffix", "equals-ignore-case", "wildcard", "cidr",
               "anything-but-ignore-case")
OR = "$or"
# A match whose $or alternatives multiply out beyond this is refused: each alternative is
# a rule of the index, and a user who needs more wants several watchers or a Python filter.
MAX_RULES = 1024
LOWER = (">", ">=")
UPPER = ("<", "<=")

Scalar = str | int | float | bool | None


class MatchError(ValueError):
    """A match that is not valid: the message is one line, naming where and the fix."""


class Selector(NamedTuple):
    """What a clause reads of a message: ``kind`` is ``topic``, ``key``, ``header`` or
    ``value``; ``path`` the header's name or the value's field path."""

    kind: str
    path: tuple[str, ...] = ()

    @property
    def is_text(self) -> bool:
        return self.kind != "value"

    def __str__(self) -> str:
        if self.kind == "header":
            return f"headers.{self.path[0]}"
        return ".".join((self.kind, *self.path))


class Exact(NamedTuple):
    value: Scalar


class Prefix(NamedTuple):
    prefix: str


class Range(NamedTuple):
    """``low`` .. ``high`` (None: unbounded), each end open or closed."""

    low: float | None
    low_open: bool
    high: float | None
    high_open: bool

    def contains(self, x: float) -> bool:
        low, high = self.low, self.high
        return ((low is None or low < x or (low == x and not self.low_open)) and
                (high is None or x < high or (x == high and not self.high_open)))


class Exists(NamedTuple):
    present: bool


class AnythingBut(NamedTuple):
    """Present and not one of ``values`` (or, with ``prefix``, not text starting with it)."""

    values: frozenset[Scalar]
    prefix: str | None = None


Condition = Exact | Prefix | Range | Exists | AnythingBut


class Clause(NamedTuple):
    """One selector and what it may be (any of ``conditions``)."""

    selector: Selector
    conditions: tuple[Condition, ...]


Rule = tuple[Clause, ...]  # all of its clauses must hold


# Matches compiled with ``keep``, by the id of the object, with the object itself (so the
# id is not reused while it is here) and its rules; forgotten wholesale at KEPT_LIMIT.
_kept: dict[int, tuple[Any, tuple[Rule, ...]]] = {}
KEPT_LIMIT = 65_536


def compile_match(match: Any, *, keep: bool = False) -> tuple[Rule, ...]:
    """Validate ``match`` and rewrite it into rules (a watcher wants a message when any
    rule holds). Raises :class:`MatchError`.

    With ``keep`` the rules are remembered for this very object, which its owner never
    changes (a trigger's own plain copy of its match): compiling it again (the group's
    declaration, the subscription's check, the value fields' check) returns them at
    once. Four compiles per watcher were a fifth of start-up at 10,000 watchers.
    """
    found = _kept.get(id(match))
    if found is not None and found[0] is match:
        return found[1]
    if not isinstance(match, Mapping):
        raise MatchError(f"a match is an object of {', '.join(SELECTORS)} or {OR}, "
                         f"not {_kind(match)}")
    if not match:
        raise MatchError("the match is empty: leave match out to receive every message")
    rules = tuple(tuple(sorted(rule, key=_selector_of)) for rule in _object(match, (), top=True))
    if keep:
        if len(_kept) >= KEPT_LIMIT:
            _kept.clear()
        _kept[id(match)] = (match, rules)
    return rules


def _selector_of(clause: Clause) -> Selector:
    return clause.selector


def selectors_of(rules: Sequence[Rule]) -> set[Selector]:
    """Every selector the rules read."""
    return {clause.selector for rule in rules for clause in rule}


def _object(pattern: Mapping[Any, Any], path: tuple[str, ...], *, top: bool = False,
            header: bool = False) -> list[list[Clause]]:
    """The alternatives (each a list of clauses) of one object of a match."""
    alternatives: list[list[list[Clause]]] = []  # per field: its alternatives
    for name, sub in pattern.items():
        if not isinstance(name, str):
            raise MatchError(f"at {_where(path)}: field names are text, not {_kind(name)}")
        if name == OR:
            alternatives.append(_or(sub, path, top=top, header=header))
        elif name.startswith("$"):
            raise MatchError(f"at {_where(path)}: unknown operator {name!r} (fields listed "
                             f"together must all match; use {OR} for alternatives)")
        elif top:
            alternatives.append(_top_field(name, sub))
        elif header:
            alternatives.append([[_clause(Selector("header", (name,)), sub, (*path, name))]])
        else:
            alternatives.append(_field(name, sub, path))
    rules: list[list[Clause]] = []
    for combination in product(*alternatives):
        rules.append([clause for part in combination for clause in part])
        if len(rules) > MAX_RULES:
            raise MatchError(f"at {_where(path)}: the match's {OR} alternatives multiply out "
                             f"to more than {MAX_RULES}: split it over several watchers")
    if not rules or not any(rules):
        raise MatchError(f"at {_where(path)}: an empty object matches nothing in particular: "
                         "name a field")
    return rules


def _or(sub: Any, path: tuple[str, ...], *, top: bool, header: bool) -> list[list[Clause]]:
    if not isinstance(sub, list | tuple) or not sub:
        raise MatchError(f"at {_where((*path, OR))}: {OR} takes a non-empty list of objects, "
                         f"not {_kind(sub)}")
    out: list[list[Clause]] = []
    for i, alternative in enumerate(sub):
        if not isinstance(alternative, Mapping):
            raise MatchError(f"at {_where((*path, OR))}[{i}]: an alternative is an object, "
                             f"not {_kind(alternative)}")
        out.extend(_object(alternative, path, top=top, header=header))
        if len(out) > MAX_RULES:
            raise MatchError(f"at {_where(path)}: the match's {OR} alternatives multiply out "
                             f"to more than {MAX_RULES}: split it over several watchers")
    return out


def _top_field(name: str, sub: Any) -> list[list[Clause]]:
    if name in ("topic", "key"):
        return [[_clause(Selector(name), sub, (name,))]]
    if name == "headers":
        if not isinstance(sub, Mapping):
            raise MatchError("at headers: an object of header names, each with a list of what "
                             f"it may be, not {_kind(sub)}")
        return _object(sub, ("headers",), header=True)
    if name == "value":
        if isinstance(sub, Mapping):
            return _object(sub, ("value",))
        return [[_clause(Selector("value"), sub, ("value",))]]
    raise MatchError(f"unknown field {name!r} at the top of the match (use "
                     f"{', '.join(SELECTORS)} or {OR})")


def _field(name: str, sub: Any, path: tuple[str, ...]) -> list[list[Clause]]:
    here = (*path, name)
    if isinstance(sub, Mapping):
        return _object(sub, here)
    return [[_clause(Selector("value", here[1:]), sub, here)]]


def _clause(selector: Selector, sub: Any, path: tuple[str, ...]) -> Clause:
    where = _where(path)
    if not isinstance(sub, list | tuple):
        hint = f" (write [{_json(sub)}])" if _is_scalar(sub) else ""
        raise MatchError(f"at {where}: a list of what it may be, not {_kind(sub)}{hint}")
    if not sub:
        raise MatchError(f"at {where}: an empty list matches nothing")
    return Clause(selector, tuple(_condition(item, selector, where) for item in sub))


def _condition(item: Any, selector: Selector, where: str) -> Condition:
    if isinstance(item, Mapping):
        if len(item) != 1:
            raise MatchError(f"at {where}: an operator object has one operator, not "
                             f"{sorted(map(str, item)) or 'none'}")
        [(operator, argument)] = item.items()
        if operator == "prefix":
            return Prefix(_text(argument, where, "prefix"))
        if operator == "numeric":
            return _range(argument, where)
        if operator == "exists":
            if not isinstance(argument, bool):
                raise MatchError(f"at {where}: exists takes true or false, not {_kind(argument)}")
            return Exists(argument)
        if operator == "anything-but":
            return _anything_but(argument, selector, where)
        if operator in UNSUPPORTED:
            raise MatchError(f"at {where}: operator {operator!r} is not supported (use "
                             f"{', '.join(OPERATORS)}, or test it in a Python filter)")
        raise MatchError(f"at {where}: unknown operator {operator!r} (use "
                         f"{', '.join(OPERATORS)})")
    return Exact(_exact(item, selector, where))


def _exact(item: Any, selector: Selector, where: str) -> Scalar:
    if not _is_scalar(item):
        raise MatchError(f"at {where}: {_kind(item)} is not a value to match (a text, number, "
                         "true, false, null or an operator object)")
    if isinstance(item, float) and not math.isfinite(item):
        raise MatchError(f"at {where}: {item!r} is not a JSON number")
    if selector.is_text and not isinstance(item, str):
        raise MatchError(f"at {where}: {selector.kind} values are text: write "
                         f"{_json(str(item) if item is not None else '')}, not {_json(item)}"
                         + (" (or {\"exists\": false} for none)" if item is None else ""))
    return item  # type: ignore[no-any-return]


def _range(argument: Any, where: str) -> Range:
    shape = ('numeric takes ["=", n], [">", n], ["<=", n] or [">", a, "<=", b] '
             f"(bounds: {', '.join((*LOWER, *UPPER))})")
    if not isinstance(argument, list | tuple) or len(argument) not in (2, 4):
        raise MatchError(f"at {where}: {shape}, not {_json(argument)}")
    ops, nums = argument[::2], [_number(n, where) for n in argument[1::2]]
    if any(not isinstance(op, str) for op in ops):
        raise MatchError(f"at {where}: {shape}, not {_json(argument)}")
    if len(ops) == 1:
        op, n = ops[0], nums[0]
        if op == "=":
            return Range(n, False, n, False)
        if op in LOWER:
            return Range(n, op == ">", None, False)
        if op in UPPER:
            return Range(None, False, n, op == "<")
        raise MatchError(f"at {where}: unknown comparison {op!r}: {shape}")
    (low_op, high_op), (low, high) = ops, nums
    if low_op not in LOWER or high_op not in UPPER:
        raise MatchError(f"at {where}: a range is a lower bound then an upper one: {shape}")
    if low > high or (low == high and (low_op == ">" or high_op == "<")):
        raise MatchError(f"at {where}: the range {_json(argument)} is empty")
    return Range(low, low_op == ">", high, high_op == "<")


def _anything_but(argument: Any, selector: Selector, where: str) -> AnythingBut:
    if isinstance(argument, Mapping):
        if set(argument) != {"prefix"}:
            raise MatchError(f"at {where}: anything-but takes a value, a list of values or "
                             f'{{"prefix": ...}}, not {_json(argument)}')
        return AnythingBut(frozenset(), _text(argument["prefix"], where, "anything-but prefix"))
    items = list(argument) if isinstance(argument, list | tuple) else [argument]
    if not items:
        raise MatchError(f"at {where}: anything-but takes a value or a non-empty list")
    values = [_exact(item, selector, where) for item in items]
    if any(v is None or isinstance(v, bool) for v in values):
        raise MatchError(f"at {where}: anything-but takes texts or numbers (for true, false "
                         'or null list the others, or use {"exists": false})')
    if len({isinstance(v, str) for v in values}) > 1:
        raise MatchError(f"at {where}: anything-but takes texts or numbers, not both")
    return AnythingBut(frozenset(values))


def _number(n: Any, where: str) -> float:
    if isinstance(n, bool) or not isinstance(n, int | float) or not math.isfinite(n):
        raise MatchError(f"at {where}: numeric bounds are numbers, not {_json(n)}")
    return n


def _text(argument: Any, where: str, what: str) -> str:
    if not isinstance(argument, str):
        raise MatchError(f"at {where}: {what} takes a text, not {_kind(argument)}")
    return argument


def _is_scalar(item: Any) -> bool:
    return item is None or isinstance(item, str | int | float | bool)


def _where(path: tuple[str, ...]) -> str:
    return ".".join(path) or "the top of the match"


def _kind(item: Any) -> str:
    if isinstance(item, Mapping):
        return "an object"
    if isinstance(item, list | tuple):
        return "a list"
    return _json(item)


def _json(item: Any) -> str:
    try:
        text = json.dumps(item)
    except (TypeError, ValueError):
        return f"a {type(item).__name__}"
    return text if len(text) <= 60 else text[:57] + "..."


__all__ = ["MAX_RULES", "AnythingBut", "Clause", "Condition", "Exact", "Exists", "MatchError",
           "Prefix", "Range", "Rule", "Selector", "compile_match", "selectors_of"]

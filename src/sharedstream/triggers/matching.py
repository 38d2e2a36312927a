"""A Kafka trigger's ``match``: kept as plain JSON data, checked against its value type.

The language and its validation are the core's (:mod:`sharedstream.core.routing`); what
this module adds is what only the trigger knows: the match is stored as the JSON data
it is (so ``serialize()`` rebuilds an equal trigger, and the console shows it as
written), and its fields of the value are checked against the ``value_deserializer``:
they read the value as JSON, so a schema-registry format (Avro, JSON Schema, Protobuf:
framed bytes, not JSON) cannot be routed on, and with ``JsonValue(model=...)`` a field
path the model cannot have is refused before anything runs (``sharedstream check``,
start-up). Errors are one line, :class:`~sharedstream.core.routing.MatchError`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from sharedstream.core.routing import MatchError, Selector, compile_match
from sharedstream.core.routing.language import selectors_of
from sharedstream.serde import JsonValue, TextValue
from sharedstream.serde.models import model_field_types


def as_match(match: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``match`` as plain JSON data (a copy of its own: tuples become lists), validated
    and compiled once (its rules kept for the group's compiles: ``compile_match``);
    None stays None."""
    if match is None:
        return None
    try:
        plain = _plain(match)
    except (TypeError, ValueError, RecursionError) as exc:
        raise MatchError(f"match: not JSON data ({exc})") from None
    try:
        compile_match(plain, keep=True)
    except MatchError as exc:
        raise MatchError(f"match: {exc}") from None
    return plain  # type: ignore[no-any-return]


def _plain(data: Any) -> Any:
    """A copy of ``data`` as the JSON it stands for: objects, lists (from tuples too),
    text, finite numbers, booleans and null (subclasses, such as enums, as their plain
    values); TypeError or ValueError naming what is not JSON. A walk, not a JSON round
    trip: that cost 9 µs per watcher, 0.1 s of a 10,000-watcher start-up."""
    kind = type(data)
    if kind is str or kind is int or kind is bool or data is None:
        return data
    if kind is float or isinstance(data, float):
        if math.isfinite(data):
            return float(data)
        raise ValueError(f"{data!r} is not a JSON number")
    if isinstance(data, Mapping):
        return {key: _plain(value) for key, value in data.items()}  # text keys: compile checks
    if isinstance(data, list | tuple):
        return [_plain(item) for item in data]
    if isinstance(data, str):
        return str.__str__(data)
    if isinstance(data, int):
        return int(data)
    raise TypeError(f"{type(data).__name__} {data!r} is not JSON")


def check_value_fields(match: Mapping[str, Any] | None, deserializer: Any) -> None:
    """Refuse value fields the declared value type cannot have (MatchError, one line)."""
    if match is None:
        return
    fields = [s for s in selectors_of(compile_match(match)) if s.kind == "value"]
    if not fields:
        return
    if deserializer is not None and not isinstance(deserializer, JsonValue | TextValue):
        raise MatchError(
            f"match: {_name(fields[0])} reads the value as JSON, and this watcher's values "
            f"are {type(deserializer).__name__}: route on key or headers, or test the value "
            "in the filter")
    model = getattr(deserializer, "model", None)
    if model is None:
        return
    for selector in sorted(fields):
        problem = _missing_field(model, selector.path)
        if problem is not None:
            raise MatchError(f"match: {_name(selector)}: {problem}")


def _missing_field(model: type[Any], path: tuple[str, ...]) -> str | None:
    """Why ``model`` cannot have ``path`` (None when it can, or cannot be told: a field
    typed ``dict`` or ``Any`` below takes any name)."""
    types: list[Any] = [model]
    for depth, name in enumerate(path):
        found: list[Any] = []
        for candidate in types:
            fields = model_field_types(candidate)
            if fields is None:
                return None  # not a model: any field may be there
            if name in fields:
                found.extend(fields[name])
        if not found:
            where = ".".join(path[:depth]) or "the value"
            names = sorted({n for t in types for n in (model_field_types(t) or {})})
            return (f"{getattr(model, '__name__', model)} has no field {name!r} at {where} "
                    f"(its fields there: {', '.join(names) or 'none'})")
        types = found
    return None


def _name(selector: Selector) -> str:
    return str(selector)


__all__ = ["as_match", "check_value_fields"]

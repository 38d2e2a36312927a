"""Dataclass models, validated strictly by the standard library alone.

Why our own: a dataclass used to be validated by msgspec when it was installed, else by
pydantic (which coerces ``"150"`` to ``150.0``), else not at all, so an unrelated extra
changed what a watcher accepted (issue 41). Here one set of rules holds whatever is
installed, msgspec's strict ones, worded as msgspec words them:

* a field's type is checked, never coerced: ``"150"`` is not a ``float``, ``1.0`` is not
  an ``int``, ``true`` is neither; the one widening is an int for a ``float``;
* a missing field without a default is refused; a field the model does not declare is
  ignored (writers may add fields before readers know them);
* text becomes ``datetime``/``date``/``time`` (ISO 8601), ``UUID``, ``Decimal`` and
  ``bytes`` (base64) where a field says so, as JSON cannot carry them otherwise; an
  Avro value's own ``datetime``, ``Decimal`` or ``bytes`` is taken as it is.

The checker of a model is built once, when the deserialiser is declared: a field type
outside the list below is refused then (:class:`TypeError`), not on the first message.
Supported: ``Any``, ``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes``, the
types above, ``Literal``, ``Enum`` subclasses, unions (``X | None``), ``list``,
``tuple``, ``set``, ``frozenset``, ``dict`` (and their ``collections.abc`` twins),
``Annotated``, ``NewType``, nested dataclasses (recursive ones too), and nested
``msgspec.Struct``/pydantic models, which validate themselves.
"""

from __future__ import annotations

import base64
import binascii
import collections.abc as abc
import dataclasses
import datetime as dt
import enum
import types
import typing
import uuid
from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

Check = Callable[[Any], Any]

_NAMES: dict[type, str] = {type(None): "null", bool: "bool", int: "int", float: "float",
                           str: "str", bytes: "bytes", bytearray: "bytes", list: "array",
                           tuple: "array", set: "array", frozenset: "array", dict: "object",
                           Decimal: "decimal", dt.datetime: "datetime", dt.date: "date",
                           dt.time: "time", uuid.UUID: "uuid"}


class Mismatch(ValueError):
    """A value that does not fit: ``reason`` in msgspec's words, and where.

    Where is built only on the way out: each container the error leaves adds its step
    (``.name``, ``[0]``) to ``steps``, innermost first, so a value that fits formats no
    path at all. ``in_key``: the reason is about a dict's key, not its value.
    """

    def __init__(self, reason: str, *, in_key: bool = False) -> None:
        super().__init__(reason)
        self.reason, self.in_key = reason, in_key
        self.steps: list[str] = []

    def __str__(self) -> str:
        path = "$" + "".join(reversed(self.steps))
        if self.in_key:
            return f"{self.reason} - at `key` in `{path}`"
        return self.reason if path == "$" else f"{self.reason} - at `{path}`"


def dataclass_checker(model: type[Any], nested: Callable[[type[Any]], Callable[[Any], Any]]
                      ) -> Check:
    """The checker of dataclass ``model``: ``check(value)`` -> an instance, or
    :class:`Mismatch`. ``nested(cls)`` converts a field typed as another model kind (a
    Struct, a pydantic model), raising ValueError for a value that does not fit and
    TypeError for a class that is no model. TypeError for a field type outside the
    supported list."""
    return _Builder(nested).build(model)


def _name(value: Any) -> str:
    for cls in type(value).__mro__:
        if cls in _NAMES:
            return _NAMES[cls]
    return type(value).__name__


def _expected(what: str, value: Any) -> Mismatch:
    return Mismatch(f"Expected `{what}`, got `{_name(value)}`")


class _Builder:
    """Compiles type annotations to checkers, once per model (cycles through ``done``)."""

    def __init__(self, nested: Callable[[type[Any]], Callable[[Any], Any]]) -> None:
        self.nested = nested
        self.done: dict[type[Any], Check] = {}

    def build(self, tp: Any, where: str = "") -> Check:
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if tp is Any or tp is object:
            return lambda value: value
        if origin is typing.Annotated:
            return self.build(args[0], where)
        if isinstance(tp, typing.NewType):
            return self.build(tp.__supertype__, where)
        if tp is None or tp is type(None):
            return _exact(type(None))
        if tp in (bool, str):
            return _exact(tp)
        if tp is int:
            return _int
        if tp is float:
            return _float
        if tp in _PARSED:
            return _PARSED[tp]
        if origin is typing.Literal:
            return _one_of(args)
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            return _one_of(tuple(tp), tp)
        if origin in (typing.Union, types.UnionType):
            return self._union(args, where)
        if tp in _SEQUENCES or origin in _SEQUENCES:
            return self._array(origin or tp, args, where)
        if tp in _MAPPINGS or origin in _MAPPINGS:
            return self._mapping(args, where)
        if dataclasses.is_dataclass(tp) and isinstance(tp, type):
            return self._object(tp)
        if isinstance(tp, type):
            try:
                return _adapted(self.nested(tp))
            except TypeError:
                pass
        raise TypeError(f"{where or 'the model'}: type {tp!r} is not one a dataclass model can "
                        "declare (see sharedstream.serde.dataclass_values); use a "
                        "msgspec.Struct or a pydantic model for it")

    def _union(self, args: tuple[Any, ...], where: str) -> Check:
        checks = [self.build(arg, where) for arg in args]
        what = " | ".join(_type_name(arg) for arg in args)

        def check(value: Any) -> Any:
            for one in checks:
                try:
                    return one(value)
                except Mismatch:
                    continue
            raise _expected(what, value)
        return check

    def _mapping(self, args: tuple[Any, ...], where: str) -> Check:
        key = self.build(args[0] if args else Any, where)
        item = self.build(args[1] if args else Any, where)

        def check(value: Any) -> Any:
            if not isinstance(value, Mapping):
                raise _expected("object", value)
            out = {}
            for k, v in value.items():
                try:
                    k = key(k)
                except Mismatch as exc:
                    raise Mismatch(exc.reason, in_key=True) from None
                try:
                    out[k] = item(v)
                except Mismatch as exc:
                    exc.steps.append("[...]")
                    raise
            return out
        return check

    def _array(self, kind: Any, args: tuple[Any, ...], where: str) -> Check:
        if kind is tuple and args and args[-1] is not Ellipsis:
            return self._fixed([self.build(arg, where) for arg in args])
        item = self.build(args[0] if args else Any, where)
        make: Callable[[Any], Any] = _SEQUENCES[kind]

        def check(value: Any) -> Any:
            if not isinstance(value, (list, tuple, set, frozenset)):
                raise _expected("array", value)
            return make(_each((item, v) for v in value))
        return check

    def _fixed(self, checks: list[Check]) -> Check:
        def check(value: Any) -> Any:
            if not isinstance(value, (list, tuple)):
                raise _expected("array", value)
            if len(value) != len(checks):
                raise Mismatch(f"Expected `array` of length {len(checks)}, got {len(value)}")
            return tuple(_each(zip(checks, value, strict=True)))
        return check

    def _object(self, model: type[Any]) -> Check:
        if model in self.done:
            return self.done[model]
        fields: list[tuple[str, Check, bool]] = []

        def check(value: Any) -> Any:
            if not isinstance(value, Mapping):
                raise _expected("object", value)
            kwargs = {}
            for name, one, required in fields:
                if name in value:
                    try:
                        kwargs[name] = one(value[name])
                    except Mismatch as exc:
                        exc.steps.append(f".{name}")
                        raise
                elif required:
                    raise Mismatch(f"Object missing required field `{name}`")
            try:
                return model(**kwargs)
            except (TypeError, ValueError) as exc:  # its __post_init__ refused the values
                raise Mismatch(str(exc)) from None
        self.done[model] = check
        try:
            hints = typing.get_type_hints(model, include_extras=True)
        except Exception as exc:
            raise TypeError(f"{model.__name__}: its field types cannot be resolved "
                            f"({type(exc).__name__}: {exc})") from None
        for field in dataclasses.fields(model):
            if field.init:
                required = (field.default is dataclasses.MISSING
                            and field.default_factory is dataclasses.MISSING)
                fields.append((field.name, self.build(
                    hints[field.name], f"{model.__name__}.{field.name}"), required))
        return check


def _each(pairs: Iterable[tuple[Check, Any]]) -> list[Any]:
    """Each value through its check, a failure naming the element's index."""
    out = []
    for i, (check, value) in enumerate(pairs):
        try:
            out.append(check(value))
        except Mismatch as exc:
            exc.steps.append(f"[{i}]")
            raise
    return out


def _adapted(convert: Callable[[Any], Any]) -> Check:
    def check(value: Any) -> Any:
        try:
            return convert(value)
        except ValueError as exc:
            raise Mismatch(str(exc)) from None
    return check


def _type_name(tp: Any) -> str:
    if tp is None or tp is type(None):
        return "null"
    origin = typing.get_origin(tp) or tp
    if origin in _SEQUENCES:
        return "array"
    if origin in _MAPPINGS or dataclasses.is_dataclass(origin):
        return "object"
    return _NAMES.get(origin, getattr(origin, "__name__", str(origin)))


def _exact(cls: type) -> Check:
    """``bool`` and ``None`` exactly; ``str`` or a subclass of it."""
    what = _NAMES[cls]

    def check(value: Any) -> Any:
        if type(value) is not cls and not (cls is str and isinstance(value, str)):
            raise _expected(what, value)
        return value
    return check


def _int(value: Any) -> Any:
    if not isinstance(value, int) or isinstance(value, bool):
        raise _expected("int", value)
    return value


def _float(value: Any) -> Any:
    if isinstance(value, float):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    raise _expected("float", value)


def _one_of(allowed: tuple[Any, ...], enum_type: type[enum.Enum] | None = None) -> Check:
    by_value = {(type(a.value if enum_type else a), a.value if enum_type else a): a
                for a in allowed}

    def check(value: Any) -> Any:
        if enum_type is not None and isinstance(value, enum_type):
            return value
        try:
            return by_value[(type(value), value)]
        except (KeyError, TypeError):
            raise Mismatch(f"Invalid enum value {value!r}") from None
    return check


def _parsed(cls: type, parse: Callable[[str], Any], invalid: str, *,
            other: tuple[type, ...] = (), make: Callable[[Any], Any] = lambda v: v) -> Check:
    """``cls`` as it is, parsed from text, or made from one of the ``other`` types."""
    def check(value: Any) -> Any:
        if type(value) is cls or (isinstance(value, cls) and cls is not dt.date):
            return value
        if isinstance(value, str):
            try:
                return parse(value)
            except (ValueError, InvalidOperation, binascii.Error):
                raise Mismatch(invalid) from None
        if isinstance(value, other) and not isinstance(value, bool):
            return make(value)
        raise _expected(_NAMES[cls], value)
    return check


def _datetime(text: str) -> dt.datetime:
    if "T" not in text.upper() and " " not in text:
        raise ValueError(text)
    return dt.datetime.fromisoformat(text)


def _bytes(text: str) -> bytes:
    return base64.b64decode(text, validate=True)


_PARSED: dict[Any, Check] = {
    dt.datetime: _parsed(dt.datetime, _datetime, "Invalid ISO 8601 datetime"),
    dt.date: _parsed(dt.date, dt.date.fromisoformat, "Invalid ISO 8601 date"),
    dt.time: _parsed(dt.time, dt.time.fromisoformat, "Invalid ISO 8601 time"),
    uuid.UUID: _parsed(uuid.UUID, uuid.UUID, "Invalid UUID"),
    Decimal: _parsed(Decimal, Decimal, "Invalid decimal string", other=(int, float),
                     make=lambda v: Decimal(str(v))),
    bytes: _parsed(bytes, _bytes, "Invalid base64 encoded string", other=(bytearray,),
                   make=bytes),
}
_SEQUENCES: dict[Any, Callable[[Any], Any]] = {
    list: list, abc.Sequence: list, abc.MutableSequence: list, abc.Iterable: list,
    tuple: tuple, set: set, abc.Set: frozenset, abc.MutableSet: set, frozenset: frozenset}
_MAPPINGS = (dict, abc.Mapping, abc.MutableMapping)


def to_builtins(value: Any, other: Callable[[Any], Any] = lambda v: v) -> Any:
    """A dataclass instance (and what it holds) as JSON-able builtins: every field, nested
    dataclasses as objects, tuples and sets as lists, datetimes as ISO 8601 text, UUIDs
    and Decimals as text, bytes as base64, enums as their values; ``other`` turns
    anything else (another model kind) into builtins."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_builtins(getattr(value, f.name), other)
                for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {to_builtins(k, other): to_builtins(v, other) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_builtins(v, other) for v in value]
    if isinstance(value, enum.Enum):
        return to_builtins(value.value, other)
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, (uuid.UUID, Decimal)):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode()
    return other(value)

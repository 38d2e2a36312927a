"""Typed values: a decoded value validated into a model, and a model back to an event payload.

A model is a dataclass, a ``msgspec.Struct`` or a pydantic model class. Validation
runs once per message and deserialiser (the decode cache keeps the model), and a
value that does not fit is a :class:`~sharedstream.core.message.ValueDecodeError`
whose reason names the field path (``$.items[0].sku``) and what was wrong, so the
watcher rejects that message and moves on.

A dataclass is validated by :mod:`sharedstream.serde.dataclass_values`, with the
standard library only, so what it accepts never depends on whether msgspec or pydantic
happens to be installed (issue 41); a ``msgspec.Struct`` or a pydantic model validates
itself, by its own rules and configuration.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from sharedstream.core.message import ValueDecodeError
from sharedstream.serde.dataclass_values import Mismatch, dataclass_checker, to_builtins


def model_converter(model: Any) -> Callable[[Any], Any]:
    """A function turning a decoded builtin (a dict, mostly) into ``model``, raising
    :class:`ValueDecodeError` with the field path; TypeError for a class that is not
    a model kind this module knows, or a dataclass with a field type it cannot check."""
    if dataclasses.is_dataclass(model) and isinstance(model, type):
        check = dataclass_checker(model, model_converter)
        name = model.__name__

        def convert_dataclass(obj: Any) -> Any:
            try:
                return check(obj)
            except Mismatch as exc:
                raise ValueDecodeError(f"{name}: {exc}") from None
        return convert_dataclass
    if _is_msgspec_struct(model):
        import msgspec

        def convert_msgspec(obj: Any) -> Any:
            try:
                return msgspec.convert(obj, model)
            except msgspec.ValidationError as exc:
                raise ValueDecodeError(f"{model.__name__}: {exc}") from None
        return convert_msgspec
    if _is_pydantic_model(model):
        import pydantic

        adapter: Any = pydantic.TypeAdapter(model)

        def convert_pydantic(obj: Any) -> Any:
            try:
                return adapter.validate_python(obj)
            except pydantic.ValidationError as exc:
                raise ValueDecodeError(f"{model.__name__}: {_pydantic_reason(exc)}") from None
        return convert_pydantic
    raise TypeError(f"{model!r} is not a model: give a dataclass, a msgspec.Struct or a "
                    "pydantic model class")


def to_payload(value: Any) -> Any:
    """What an event built from ``value`` stores: builtins for a model (JSON-able), the
    value itself otherwise."""
    if _is_pydantic_instance(value):
        return value.model_dump(mode="json")
    if _is_msgspec_struct(type(value)):
        import msgspec
        return msgspec.to_builtins(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_builtins(value, to_payload)
    if hasattr(value, "DESCRIPTOR") and hasattr(value, "SerializeToString"):
        from google.protobuf.json_format import MessageToDict
        return MessageToDict(value, preserving_proto_field_name=True)
    return value


def _pydantic_reason(exc: Any) -> str:
    parts = []
    for error in exc.errors()[:3]:
        path = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error["loc"])
        parts.append(f"{error['msg']} - at `{path}`")
    more = exc.error_count() - len(parts)
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


def _is_msgspec_struct(cls: Any) -> bool:
    return any(f"{c.__module__}.{c.__qualname__}" == "msgspec.Struct"
               for c in getattr(cls, "__mro__", ()))


def _is_pydantic_model(cls: Any) -> bool:
    return any(f"{c.__module__}.{c.__qualname__}" == "pydantic.main.BaseModel"
               for c in getattr(cls, "__mro__", ()))


def _is_pydantic_instance(value: Any) -> bool:
    return _is_pydantic_model(type(value))

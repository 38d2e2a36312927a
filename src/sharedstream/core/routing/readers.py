"""What a match's selectors read of a message: the values each offers, empty when absent.

A message is a ``KafkaMessage``, or anything with its attributes (a message without one
offers nothing there): ``topic``; ``key`` as UTF-8 text; a header's values as UTF-8
text; a field of ``msg.json`` (the decode every watcher of the group shares), looking
into every list met on the way, an object at the end offering :data:`OBJECT` (present,
equal to nothing). A value that is not JSON, or a tombstone, has no fields.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from sharedstream.core.message import ValueDecodeError
from sharedstream.core.routing.language import Selector

Values = tuple[Any, ...]  # what a selector offers for one message; () when absent
Reader = Callable[[Any], Values]
# A field whose value is a JSON object: present (exists, anything-but), equal to nothing.
OBJECT: Any = type("Object", (), {"__repr__": lambda self: "<object>"})()
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?\Z")


def read_selector(selector: Selector) -> Reader:
    """What ``selector`` reads of a message (a ``KafkaMessage``, or anything with its
    attributes: a message without one offers nothing there): a tuple of its values,
    empty when absent."""
    kind = selector.kind
    if kind == "topic":
        return lambda message: (getattr(message, "topic", None),)
    if kind == "key":
        return _read_key
    if kind == "header":
        name = selector.path[0]
        return lambda message: _read_header(message, name)
    path = selector.path
    return lambda message: _read_value(message, path)


def _read_key(message: Any) -> Values:
    key = getattr(message, "key", None)
    if key is None:
        return ()
    try:
        return (key.decode("utf-8"),)
    except UnicodeDecodeError:
        return ()


def _read_header(message: Any, name: str) -> Values:
    found: list[str | None] = []
    for header, value in getattr(message, "headers", None) or ():
        if header == name:
            if value is None:
                found.append(None)
            else:
                try:
                    found.append(value.decode("utf-8"))
                except UnicodeDecodeError:
                    continue
    return tuple(found)


def _read_value(message: Any, path: tuple[str, ...]) -> Values:
    if getattr(message, "value", None) is None:
        return ()
    try:
        node = message.json
    except ValueDecodeError:
        return ()
    for i, name in enumerate(path):
        if type(node) is dict:
            node = node.get(name, _MISSING)
            if node is _MISSING:
                return ()
        elif type(node) is list:
            return _through_lists([node], path[i:])
        else:
            return ()
    return _leaf(node)


def _through_lists(nodes: list[Any], path: Sequence[str]) -> Values:
    """The values at ``path`` below ``nodes``, looking into every list met on the way."""
    for name in path:
        found = []
        for node in _flat(nodes):
            if type(node) is dict and name in node:
                found.append(node[name])
        nodes = found
    out: list[Any] = []
    for node in nodes:
        out.extend(_leaf(node))
    return tuple(out)


def _flat(nodes: Iterable[Any]) -> Iterable[Any]:
    for node in nodes:
        if type(node) is list:
            yield from _flat(node)
        else:
            yield node


def _leaf(node: Any) -> Values:
    if type(node) is list:
        return tuple(OBJECT if type(v) is dict else v for v in _flat(node))
    return (OBJECT if type(node) is dict else node,)


_MISSING: Any = object()


def text_number(text: str) -> float | int | None:
    """Key, topic or header text read as a number (JSON's number syntax), else None."""
    if not _NUMBER.match(text):
        return None
    return int(text) if text.lstrip("-").isdigit() else float(text)


__all__ = ["OBJECT", "Reader", "Values", "read_selector", "text_number"]

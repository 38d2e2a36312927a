"""Ordering used by ``advance``: numbers, ISO-8601 instants, strings, lists."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import cast

_ISO_PREFIX = re.compile(r"^\d{4}-\d{2}-\d{2}")
_PLAIN_NUMBERS = (int, float)


def _instant(text: str) -> datetime | None:
    if not _ISO_PREFIX.match(text):
        return None
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    # A naive timestamp is read as UTC so it still orders against aware ones.
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _kind(value: object) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    return type(value).__name__


def compare(new: object, old: object) -> int:
    """Return -1, 0 or 1 as ``new`` is below, equal to or above ``old``.

    Two strings that both parse as ISO-8601 are compared as instants (so ``...+02:00`` and
    ``...Z`` order by time, not by text); otherwise strings compare by code point. Lists
    compare element-wise with these rules, a proper prefix being lower. Anything else, and
    any mix of kinds, raises TypeError: an ordering guessed across kinds would let a
    watermark jump or stick silently.
    """
    # Plain numbers first: the usual watermark (an offset), compared on every advance.
    if type(new) in _PLAIN_NUMBERS and type(old) in _PLAIN_NUMBERS:  # not bool: a kind apart
        a, b = cast(float, new), cast(float, old)
        return (a > b) - (a < b)
    new_kind, old_kind = _kind(new), _kind(old)
    if new_kind != old_kind or new_kind not in ("number", "string", "list"):
        raise TypeError(f"advance cannot compare {new_kind} with {old_kind}")
    if isinstance(new, list) and isinstance(old, list):
        for a, b in zip(new, old, strict=False):
            result = compare(a, b)
            if result:
                return result
        return (len(new) > len(old)) - (len(new) < len(old))
    if isinstance(new, str) and isinstance(old, str):
        new_at, old_at = _instant(new), _instant(old)
        if new_at is not None and old_at is not None:
            return (new_at > old_at) - (new_at < old_at)
        return (new > old) - (new < old)
    assert isinstance(new, int | float) and isinstance(old, int | float)
    return (new > old) - (new < old)


def is_forward(new: object, old: object) -> bool:
    return compare(new, old) > 0

"""Operator times: durations (``90s``, ``15m``, ``12h``, ``7d``, ``2w``, ``1d12h``) and
instants parsed, and the one format every time is printed in (:func:`stamp`)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

_PART = re.compile(r"(\d+)([smhdw])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def utcnow() -> datetime:
    """Now, in UTC (every stored time is UTC)."""
    return datetime.now(UTC)


def parse_duration(text: str) -> timedelta:
    cleaned = text.strip().lower()
    if not cleaned or _PART.sub("", cleaned):
        raise ValueError(f"not a duration: {text!r} (use e.g. 30s, 15m, 12h, 7d, 2w, 1d12h)")
    total = timedelta()
    for amount, unit in _PART.findall(cleaned):
        total += timedelta(**{_UNITS[unit]: int(amount)})
    return total


def parse_instant(text: str, now: datetime) -> datetime:
    """An ISO-8601 instant (naive means UTC), or a duration before ``now`` (``10m`` ago).

    Operators type both: "since 2024-05-01T10:00Z" after an incident, "since 2h" while
    watching. A naive timestamp is taken as UTC because every stored time is UTC.
    """
    try:
        return now - parse_duration(text)
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"not an ISO-8601 time or a duration: {text!r} "
                         "(use e.g. 2024-05-01T10:00:00Z, 10m, 2h, 7d)") from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def stamp(value: datetime, timespec: str = "seconds") -> str:
    """The one timestamp format of every command's output (text and JSON) and of the
    console (pages and API): ISO 8601 in UTC with ``Z``, to the second unless
    ``timespec`` asks otherwise (``datetime.isoformat``'s). Naive means UTC.

    To the second, cut, not rounded: pasted into a ``--since``, a printed time starts at
    or before what it was copied from, never after it.
    """
    utc = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return utc.isoformat(timespec=timespec).replace("+00:00", "Z")

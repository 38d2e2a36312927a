"""Operator times: durations (``90s``, ``15m``, ``12h``, ``7d``, ``2w``, ``1d12h``) and
instants parsed, and the one format every time is printed in (:func:`stamp`).

Every command and the console parse times here, so this is where a time that cannot be
used becomes a ValueError with a sentence an operator can act on. A duration is at most
:data:`MAX_DURATION` (a century): every use subtracts it from now (``--since``,
``--older-than``) or adds it (``--retention``), and a datetime holds years 1 to 9999
only, so a longer one would end in an OverflowError in whatever computes with it. An
instant is returned in UTC, and one that UTC cannot hold (``9999-12-31T23:59:59-05:00``)
is refused here, not by the database driver binding it.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

_PART = re.compile(r"(\d+)([smhdw])")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
MAX_DURATION = timedelta(days=36500)
_SHOWN_CHARS = 40  # of an input quoted back in an error (a pasted megabyte is not)


class DurationTooLong(ValueError):
    """A well-formed duration over :data:`MAX_DURATION`."""


class NotAnInstant(ValueError):
    """Text that is neither an ISO-8601 time nor a duration (a caller accepting more
    words, such as ``earliest``, names them instead)."""


def shown(text: str) -> str:
    """``text`` quoted for an error message, cut when long."""
    return repr(text) if len(text) <= _SHOWN_CHARS else f"{text[:_SHOWN_CHARS]!r}..."


def utcnow() -> datetime:
    """Now, in UTC (every stored time is UTC)."""
    return datetime.now(UTC)


def parse_duration(text: str) -> timedelta:
    cleaned = text.strip().lower()
    if not cleaned or _PART.sub("", cleaned):
        raise ValueError(f"not a duration: {shown(text)} (use e.g. 30s, 15m, 12h, 7d, 2w, "
                         "1d12h)")
    # Whole seconds in Python ints: no part can overflow timedelta before it is compared.
    seconds = 0
    for amount, unit in _PART.findall(cleaned):
        digits = amount.lstrip("0") or "0"
        seconds += int(digits) * _SECONDS[unit] if len(digits) <= 20 else 10**30
    if seconds > MAX_DURATION.total_seconds():
        raise DurationTooLong(f"duration too long: {shown(text)} (at most 36500d (100 "
                              "years); for an instant longer ago give an ISO-8601 time)")
    return timedelta(seconds=seconds)


def parse_instant(text: str, now: datetime) -> datetime:
    """An ISO-8601 instant (naive means UTC), or a duration before ``now`` (``10m`` ago),
    in UTC.

    Operators type both: "since 2024-05-01T10:00Z" after an incident, "since 2h" while
    watching. A naive timestamp is taken as UTC because every stored time is UTC.
    """
    try:
        return now - parse_duration(text)
    except DurationTooLong:
        raise
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(text.strip())
    except ValueError:
        raise NotAnInstant(f"not an ISO-8601 time or a duration: {shown(text)} "
                         "(use e.g. 2024-05-01T10:00:00Z, 10m, 2h, 7d)") from None
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=UTC)
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        raise ValueError(f"{shown(text)} is out of range in UTC (years 1 to 9999)") from None


def stamp(value: datetime, timespec: str = "seconds") -> str:
    """The one timestamp format of every command's output (text and JSON) and of the
    console (pages and API): ISO 8601 in UTC with ``Z``, to the second unless
    ``timespec`` asks otherwise (``datetime.isoformat``'s). Naive means UTC.

    To the second, cut, not rounded: pasted into a ``--since``, a printed time starts at
    or before what it was copied from, never after it.
    """
    utc = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return utc.isoformat(timespec=timespec).replace("+00:00", "Z")

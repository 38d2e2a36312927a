"""Parse operator durations such as ``90s``, ``15m``, ``12h``, ``7d``, ``2w`` or ``1d12h``."""

from __future__ import annotations

import re
from datetime import timedelta

_PART = re.compile(r"(\d+)([smhdw])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_duration(text: str) -> timedelta:
    cleaned = text.strip().lower()
    if not cleaned or _PART.sub("", cleaned):
        raise ValueError(f"not a duration: {text!r} (use e.g. 30s, 15m, 12h, 7d, 2w, 1d12h)")
    total = timedelta()
    for amount, unit in _PART.findall(cleaned):
        total += timedelta(**{_UNITS[unit]: int(amount)})
    return total

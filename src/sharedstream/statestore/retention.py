"""Retention of task state: when a row written now expires."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Final


class _NeverExpire:
    """Sentinel type: the row never expires (``expires_at`` is NULL)."""

    _instance: _NeverExpire | None = None

    def __new__(cls) -> _NeverExpire:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NEVER_EXPIRE"

    def __reduce__(self) -> str:
        return "NEVER_EXPIRE"


NEVER_EXPIRE: Final = _NeverExpire()

Retention = timedelta | _NeverExpire | None


def resolve_expiry(retention: object, default_days: int, now: datetime) -> datetime | None:
    """Return ``expires_at`` (UTC) for a write at ``now``, or None for never.

    An int is refused rather than read as days or seconds: the unit would be a guess.
    """
    if retention is NEVER_EXPIRE:
        return None
    if retention is None:
        if isinstance(default_days, bool) or not isinstance(default_days, int):
            raise TypeError("default_retention_days must be an int")
        if default_days < 0:
            raise ValueError("default_retention_days must be >= 0 (0 = never expire)")
        return None if default_days == 0 else now + timedelta(days=default_days)
    if isinstance(retention, timedelta):
        if retention <= timedelta(0):
            raise ValueError(f"retention must be positive, got {retention}")
        return now + retention
    raise TypeError(
        "retention must be a timedelta, NEVER_EXPIRE or None, "
        f"not {type(retention).__name__}"
    )

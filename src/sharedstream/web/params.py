"""The console's numeric and time parameters: one set of bounds for the API and the pages.

A number reaches SQL only inside the range of the column it is compared with
(partitions are 32-bit, offsets and ids 64-bit), so a typo or a crawler's URL is a 400
naming the parameter and its range, never a database error (PostgreSQL refuses the
value, a 503 that looks like an outage; SQLite's driver raises, a 500). Page sizes and
skips have the API's limits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from fastapi.exceptions import RequestValidationError

from sharedstream.statestore.durations import parse_instant
from sharedstream.statestore.types import utcnow


class BadParameter(ValueError):
    """A query parameter that cannot be used (a 400); the message is one sentence."""


@dataclass(frozen=True, slots=True)
class Bound:
    low: int
    high: int

    def message(self, name: str) -> str:
        return f"{name} must be an integer from {self.low} to {self.high}"


INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
PARTITION = Bound(0, INT32_MAX)
MESSAGE_OFFSET = Bound(0, INT64_MAX)
EVENT_ID = Bound(1, INT64_MAX)
MAP_INDEX = Bound(-1, INT32_MAX)
SKIP = Bound(0, 1_000_000)
LIMIT = Bound(1, 500)

# Every integer parameter by name, in the API (query and path) and in the pages' URLs.
BOUNDS: dict[str, Bound] = {
    "partition": PARTITION, "message_offset": MESSAGE_OFFSET, "before": EVENT_ID,
    "event_id": EVENT_ID, "map_index": MAP_INDEX, "offset": SKIP,
    "rejected_offset": SKIP, "limit": LIMIT}


def page_int(params: Mapping[str, str], name: str) -> int | None:
    """``params[name]`` within its bound; None when absent or empty (an unfilled form field)."""
    text = params.get(name)
    if text is None or not text.strip():
        return None
    bound = BOUNDS[name]
    try:
        value = int(text)
    except ValueError:
        raise BadParameter(bound.message(name)) from None
    if not bound.low <= value <= bound.high:
        raise BadParameter(bound.message(name))
    return value


def instant(text: str | None, name: str) -> datetime | None:
    """``since``/``until``: ISO-8601 or a duration ago, in UTC; a :class:`BadParameter`
    otherwise (a time UTC cannot hold too: the database driver would fail on it)."""
    if text is None:
        return None
    try:
        return parse_instant(text, utcnow())
    except ValueError as exc:
        raise BadParameter(f"{name}: {exc}") from None


def validation_detail(exc: RequestValidationError) -> str:
    """The first problem, as one sentence naming the parameter or body field (never the
    value given): the innermost name of its location, ``watchers`` for ``watchers[0]``."""
    error = exc.errors()[0]
    if error.get("type") == "json_invalid":
        return "request body: not valid JSON"
    names = [str(part) for part in error.get("loc", ()) if isinstance(part, str)
             and part not in ("body", "query", "path")]
    name = names[-1] if names else "request body"
    bound = BOUNDS.get(name)
    if bound is not None and str(error.get("type", "")).startswith(("int_", "greater_",
                                                                     "less_")):
        return bound.message(name)
    return f"{name}: {error.get('msg', 'invalid')}"

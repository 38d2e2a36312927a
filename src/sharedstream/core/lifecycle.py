"""The one error of core's lifecycles: a move between states that is not allowed.

The group (its lifecycle and its flow control), a watcher's stream and a window each
keep their state in one enum, and list the moves they allow at the top of their
module. A move outside that list is a bug in the caller, never a condition to recover
from, so it raises :class:`InvalidState` at once rather than leaving an object in a
state its other methods were not written for.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import TypeVar

S = TypeVar("S", bound=enum.Enum)


class InvalidState(RuntimeError):
    """A lifecycle was asked for a move its module does not allow."""


def check_move(what: str, moves: Mapping[S, frozenset[S]], old: S, new: S) -> S:
    """``new`` when ``old -> new`` is one of ``moves``; raise :class:`InvalidState` if not."""
    if new not in moves[old]:
        allowed = ", ".join(sorted(s.name for s in moves[old])) or "none: it is final"
        raise InvalidState(f"{what}: {old.name} -> {new.name} is not allowed "
                           f"(from {old.name}: {allowed})")
    return new

"""A group's two lifecycles as enums, and the moves each allows.

Lifecycle of a group (:class:`GroupState`; any other move raises
:class:`~sharedstream.core.lifecycle.InvalidState`)::

    GATHERING -> POLLING     the whole cohort subscribed, or the grace period ran out
    GATHERING -> STOPPING    stop() (the last watcher left, or shutdown)
    POLLING   -> STOPPING
    GATHERING -> FAILED      the adapter's stream raised or ended, or it refused a
    POLLING   -> FAILED      dead letter: every watcher's stream raises GroupFailedError
    STOPPING  -> CLOSING     the adapter is closing: what resolves now is not settled

CLOSING and FAILED are final (the adapter's close task says when it is closed).

Flow control, while polling (:class:`Flow`)::

    FLOWING -> PAUSED     max_in_flight reached, or a watcher lags (its queue full)
    PAUSED  -> FLOWING    in flight down to half its bound and every lagging queue to
                          half (core/flowcontrol.py decides both moves)
    FLOWING -> QUIESCED   quiesce() (shutdown): nothing new is fetched again
    PAUSED  -> QUIESCED

QUIESCED is final. They live apart from :mod:`sharedstream.core.group` because the
group's parts read them: :class:`Lifecycle` holds the group's state, shared with the
parts that must not act once it ends (the resolution settles nothing once CLOSING or
FAILED, the commit targets are published no more), and the flow is
:mod:`sharedstream.core.flowcontrol`'s.
"""

from __future__ import annotations

import enum
from typing import Any

from sharedstream.core.lifecycle import check_move


class GroupState(enum.Enum):
    """Where a group is in its lifecycle (the module docstring lists the moves)."""

    GATHERING = "gathering"
    POLLING = "polling"
    STOPPING = "stopping"
    CLOSING = "closing"
    FAILED = "failed"


class Flow(enum.Enum):
    """Whether a polling group fetches (the module docstring lists the moves)."""

    FLOWING = "flowing"
    PAUSED = "paused"
    QUIESCED = "quiesced"


GATHERING, POLLING, STOPPING = GroupState.GATHERING, GroupState.POLLING, GroupState.STOPPING
CLOSING, FAILED = GroupState.CLOSING, GroupState.FAILED
FLOWING, PAUSED, QUIESCED = Flow.FLOWING, Flow.PAUSED, Flow.QUIESCED
_NONE: frozenset[Any] = frozenset()
MOVES: dict[GroupState, frozenset[GroupState]] = {
    GATHERING: frozenset({POLLING, STOPPING, FAILED}), POLLING: frozenset({STOPPING, FAILED}),
    STOPPING: frozenset({CLOSING}), CLOSING: _NONE, FAILED: _NONE}
FLOW_MOVES: dict[Flow, frozenset[Flow]] = {
    FLOWING: frozenset({PAUSED, QUIESCED}), PAUSED: frozenset({FLOWING, QUIESCED}),
    QUIESCED: _NONE}


class Lifecycle:
    """One group's state, held apart from the group so that its parts read it without
    holding the group (one attribute read where they check it, per message)."""

    __slots__ = ("label", "state")

    def __init__(self, label: str) -> None:
        self.label = label
        self.state = GATHERING

    def move(self, state: GroupState) -> None:
        self.state = check_move(self.label, MOVES, self.state, state)

    @property
    def settling(self) -> bool:
        """Whether an outcome may still settle (not once the adapter is closing or the
        group failed: what resolves then stays uncommitted, read again by the next
        consumer)."""
        return self.state is not CLOSING and self.state is not FAILED

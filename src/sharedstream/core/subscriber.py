"""What the manager needs of a trigger that subscribes to a shared stream.

``sharedstream.triggers.BaseEventTrigger`` implements it; the core names only this
Protocol, so the engine never imports the user-facing room above it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Hashable, Mapping, Sequence
from typing import Any, Protocol

from sharedstream.core.contract import SharedStreamProducer
from sharedstream.core.event import TriggerEvent


class Subscriber(Protocol):
    """A trigger the manager can group, build a producer for, and feed messages."""

    def shared_stream_key(self) -> Hashable | None: ...

    def shared_stream_arguments(self) -> Mapping[str, Any]: ...

    @classmethod
    def create_shared_stream_producer(
        cls, kwargs: Mapping[str, Any]) -> SharedStreamProducer[Any]: ...

    def filter_shared_stream(self, stream: AsyncIterator[Any]) -> AsyncIterator[TriggerEvent]: ...


class SharedStreamConflictError(ValueError):
    """Two watchers of one group disagree on an argument the group's producer is built from."""


def check_shared_stream_group(members: Sequence[tuple[str, Subscriber]]) -> None:
    """Refuse a group whose triggers disagree on ``shared_stream_arguments()``.

    ``members`` are ``(watcher name, trigger)`` of one group (equal keys), the first
    being the reference. Raises :class:`SharedStreamConflictError` naming both
    watchers, the argument and both values. The manager calls it at subscribe and
    the loader at start-up, so a conflict never reaches a running group.
    """
    if len(members) < 2:
        return
    first_name, first = members[0]
    reference = first.shared_stream_arguments()
    for name, trigger in members[1:]:
        arguments = trigger.shared_stream_arguments()
        for arg in sorted(reference.keys() | arguments.keys()):
            mine, theirs = reference.get(arg, _MISSING), arguments.get(arg, _MISSING)
            if mine != theirs:
                raise SharedStreamConflictError(
                    f"watchers {first_name!r} and {name!r} share the stream "
                    f"{first.shared_stream_key()!r} but disagree on {arg}: "
                    f"{mine!r} != {theirs!r}")


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


_MISSING = _Missing()

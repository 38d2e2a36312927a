"""What one call of ``filter_shared_batch`` handles, and what it says of each message.

:class:`MessageBatch` is the public object a batch filter receives
(:mod:`sharedstream.core.batch` runs the calls and settles what the batch says).

Failure window: none; a batch lives in memory for one call.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sharedstream.core.event import TriggerEvent


class MessageBatch:
    """The messages one call of ``filter_shared_batch`` handles, and what it said of them.

    Iterate it for the messages (the same :class:`~sharedstream.core.message.KafkaMessage`
    objects every watcher of the group receives: ``msg.json`` decodes once for all).
    Say nothing of a message to filter it out; :meth:`emit` an event for it, or
    :meth:`reject` it. ``emitted`` (message index -> its events) and ``rejected``
    (message index -> reason) stay None until something is said, so a batch that keeps
    nothing costs no bookkeeping per message.
    """

    __slots__ = ("_index", "emitted", "messages", "rejected")

    def __init__(self, messages: list[Any]) -> None:
        self.messages = messages
        self.emitted: dict[int, list[TriggerEvent]] | None = None
        self.rejected: dict[int, str] | None = None
        self._index: dict[int, int] | None = None

    def __iter__(self) -> Iterator[Any]:
        return iter(self.messages)

    def __len__(self) -> int:
        return len(self.messages)

    def _position(self, message: Any) -> int:
        index = self._index
        if index is None:  # built on the first emit or reject only: most batches keep ~1%
            index = self._index = {id(m): i for i, m in enumerate(self.messages)}
        found = index.get(id(message))
        if found is None:
            raise ValueError(f"{message!r} is not a message of this batch (emit and reject "
                             "take the objects the batch yields)")
        return found

    def emit(self, message: Any, event: TriggerEvent) -> None:
        """Bind ``event`` to ``message``: stored once its unit of work commits, keyed by
        the message and its index among that message's events. Ignored for a message
        already rejected."""
        if not isinstance(event, TriggerEvent):
            raise TypeError(f"batch.emit() takes a TriggerEvent, not {type(event).__qualname__}")
        i = self._position(message)
        if self.rejected is not None and i in self.rejected:
            return
        emitted = self.emitted
        if emitted is None:
            emitted = self.emitted = {}
        events = emitted.get(i)
        if events is None:
            emitted[i] = [event]
        else:
            events.append(event)

    def reject(self, message: Any, reason: str = "") -> None:
        """Reject ``message`` for this watcher (dead letter, with ``reason``); its events
        are dropped. Resolved when the call returns, not before."""
        i = self._position(message)
        if self.rejected is None:
            self.rejected = {}
        self.rejected[i] = reason
        if self.emitted is not None:
            self.emitted.pop(i, None)


__all__ = ["MessageBatch"]

"""The trigger side of a shared stream: BaseEventTrigger, TriggerEvent, reject.

A shared-stream trigger does not read its broker itself. The triggerer groups
triggers by :meth:`BaseEventTrigger.shared_stream_key`, builds one producer per
group with :meth:`BaseEventTrigger.create_shared_stream_producer`, and feeds every
trigger of the group the same messages through its
:meth:`BaseEventTrigger.filter_shared_stream`. Every TriggerEvent the filter yields
is bound to the message it is handling; the message is acknowledged for that
watcher only when its events and staged state are durably committed.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import AsyncIterator, Hashable, Mapping
from typing import Any

from sharedstream.core.contract import SharedStreamProducer
from sharedstream.core.event import TriggerEvent
from sharedstream.core.subscriber import SharedStreamConflictError, check_shared_stream_group
from sharedstream.core.window import reject_current

log = logging.getLogger(__name__)

_STORE_ATTR = "_sharedstream_asset_state_store"


def classpath(obj: object) -> str:
    """``module.QualName`` of an object's class, as :meth:`BaseEventTrigger.serialize` uses."""
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


class BaseEventTrigger:
    """Base class of every event trigger an :class:`~sharedstream.AssetWatcher` runs.

    Subclasses implement :meth:`serialize`, and either :meth:`run` (a trigger with
    its own loop) or the shared-stream hooks (:meth:`shared_stream_key`,
    :meth:`create_shared_stream_producer`, optionally :meth:`filter_shared_stream`
    and :meth:`shared_stream_arguments`).
    """

    def shared_stream_key(self) -> Hashable | None:
        """The group this trigger shares a stream with; None means "not shared".

        Triggers with equal keys share one producer (one consumer, one poll loop).
        """
        return None

    def shared_stream_arguments(self) -> Mapping[str, Any]:
        """The arguments every trigger of this group must agree on.

        The group's one producer is built from them
        (:meth:`create_shared_stream_producer`), so a disagreement would silently
        apply one watcher's settings to another: :func:`check_shared_stream_group`
        refuses it instead. Arguments only the filter uses (a subclass's threshold)
        belong outside this mapping, so such watchers can share a stream.
        The default is every serialized kwarg: safe, but strict.
        """
        return self.serialize()[1]

    @classmethod
    def create_shared_stream_producer(cls, kwargs: Mapping[str, Any]) -> SharedStreamProducer[Any]:
        """Build the group's producer from :meth:`shared_stream_arguments` of a member.

        Called once per group, when its first watcher subscribes. Raising is
        terminal for the group: the subscribing watchers fail, nothing is retried.
        """
        raise NotImplementedError(f"{cls.__qualname__} does not use a shared stream")

    async def filter_shared_stream(self, stream: AsyncIterator[Any]) -> AsyncIterator[TriggerEvent]:
        """Turn the shared stream into this watcher's events.

        Iterate ``stream``; for each message yield zero or more TriggerEvents,
        ``continue`` to filter it out, or call :func:`reject_shared_stream_event`.
        Moving on to the next message is what acknowledges the previous one
        (once its events commit). Raising fails this watcher for the message being
        handled; the trigger is restarted with backoff and the message redelivered.
        The default yields one event per message with the message as payload.
        """
        async for message in stream:
            yield TriggerEvent(message)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """``(classpath, kwargs)`` such that ``cls(**kwargs)`` rebuilds an equal trigger."""
        raise NotImplementedError(f"{type(self).__qualname__} must implement serialize()")

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """The event loop of a trigger that does not share a stream."""
        raise NotImplementedError(
            f"{type(self).__qualname__} only runs through the shared-stream manager")
        yield  # pragma: no cover - makes this an async generator

    @property
    def asset_state_store(self) -> Any:
        """The watcher's asset state accessor, injected by the triggerer before the trigger runs.

        Writes made while a message is being handled are staged into that message's
        unit of work; outside a message they commit at once.
        """
        store = getattr(self, _STORE_ATTR, None)
        if store is None:
            raise RuntimeError(
                f"{type(self).__qualname__}.asset_state_store is not available yet: the "
                "triggerer injects it before the trigger runs (not in __init__ or serialize)")
        return store

    @asset_state_store.setter
    def asset_state_store(self, store: Any) -> None:
        setattr(self, _STORE_ATTR, store)


def reject_shared_stream_event(reason: str = "") -> None:
    """Reject the message this watcher is handling: it goes to the dead-letter topic.

    The rejection resolves the message for this watcher at once (no persistence
    gate); events yielded for it, before or after, are discarded. Outside a message
    window (before the first message, from another task) this does nothing and warns.
    """
    if not reject_current(reason):
        log.warning("reject_shared_stream_event(%r) called outside a message window: ignored",
                    reason)
        warnings.warn("reject_shared_stream_event() called outside a message window: ignored",
                      RuntimeWarning, stacklevel=2)


__all__ = [
    "BaseEventTrigger",
    "SharedStreamConflictError",
    "TriggerEvent",
    "check_shared_stream_group",
    "classpath",
    "reject_shared_stream_event",
]

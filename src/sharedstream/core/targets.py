"""A group's commit targets: handed to the adapter once per ``commit_interval``, and as
soon as the group has nothing in flight.

The fan-out asks for a publish when it admits a batch, the resolution when it settles
something; the first ask arms one timer, and when it fires the ledger's targets of the
partitions that changed since the last publish (O(changes)) go to the adapter. A
settlement that leaves the group nothing in flight (every message handed out resolved,
none held: :meth:`CommitTargets.drained`) has nothing to wait for: the publish moves to
the end of that step (``call_soon``: never inside the hand-out or settlement that
drained it), so a group that has caught up commits at once, not up to an interval later
(an adapter may decline: ``commit_when_idle``). Under load that is at most one publish
per consumed batch, each O(changes). Nothing is published once the group is closing or
failed (:class:`~sharedstream.core.groupstate.Lifecycle`): what resolves then stays
uncommitted.

Failure window: what settled after the last publish is not committed if the process
dies; the next consumer reads it again (at most one ``commit_interval`` of it).
"""

from __future__ import annotations

import asyncio
from typing import Any

from sharedstream.core.contract import SharedStreamProducer
from sharedstream.core.groupstate import Lifecycle
from sharedstream.core.ledger import Ledger


class CommitTargets:
    """The publish timer of one group (see the module docstring)."""

    __slots__ = ("_idle", "_ledger", "_life", "_producer", "handle")

    def __init__(self, ledger: Ledger, producer: SharedStreamProducer[Any],
                 life: Lifecycle) -> None:
        self._ledger = ledger
        self._producer = producer
        self._life = life
        self._idle = producer.commit_when_idle
        # The armed publish (the timer, or the end of this step); None when none is due.
        # Callers test it before ``schedule``, which spares a call per settled message.
        self.handle: asyncio.Handle | None = None

    def schedule(self) -> None:
        """Publish within ``commit_interval`` (no-op when already due, or ended)."""
        if self.handle is None and self._life.settling:
            self.handle = asyncio.get_running_loop().call_later(
                self._producer.commit_interval, self.publish)

    def drained(self) -> None:
        """Nothing is in flight: publish at the end of this step instead of at the timer
        (no-op when already due then, or ended; the timer when the adapter declines)."""
        handle = self.handle
        if not self._idle:
            if handle is None:
                self.schedule()
            return
        if not self._life.settling or (
                handle is not None and not isinstance(handle, asyncio.TimerHandle)):
            return
        if handle is not None:
            handle.cancel()
        self.handle = asyncio.get_running_loop().call_soon(self.publish)

    def publish(self) -> None:
        """Hand the adapter the commit targets of the partitions that changed, now."""
        self.handle = None
        targets = self._ledger.publish()
        if targets:
            self._producer.publish(targets)

    def cancel(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None

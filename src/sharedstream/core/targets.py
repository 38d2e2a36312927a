"""A group's commit targets: handed to the adapter at most once per ``commit_interval``.

The fan-out asks for a publish when it admits a batch, the resolution when it settles
something; the first ask arms one timer, and when it fires the ledger's targets of the
partitions that changed since the last publish (O(changes)) go to the adapter. Nothing
is published once the group is closing or failed (:class:`~sharedstream.core.groupstate.
Lifecycle`): what resolves then stays uncommitted.

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

    __slots__ = ("_ledger", "_life", "_producer", "handle")

    def __init__(self, ledger: Ledger, producer: SharedStreamProducer[Any],
                 life: Lifecycle) -> None:
        self._ledger = ledger
        self._producer = producer
        self._life = life
        # The armed timer; None when no publish is due. Callers test it before
        # ``schedule``, which spares a call per settled message.
        self.handle: asyncio.TimerHandle | None = None

    def schedule(self) -> None:
        """Publish within ``commit_interval`` (no-op when already due, or ended)."""
        if self.handle is None and self._life.settling:
            self.handle = asyncio.get_running_loop().call_later(
                self._producer.commit_interval, self.publish)

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

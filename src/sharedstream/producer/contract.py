"""The contract between the shared-stream manager and a broker-side producer.

A producer owns exactly one broker connection for one shared-stream group. The
manager pulls messages from :meth:`SharedStreamProducer.open_stream`, fans each
one out to the group's cohort of watchers, and hands back, lane by lane, the
contiguous prefix of messages whose outcome is known through
:meth:`SharedStreamProducer.advance`. The producer alone decides what that means
for the broker (commit offsets, hold a floor, deliver dead letters).

Failure windows the contract is built around:

* The process can die at any point after a message was handed out and before
  ``advance`` ran for it: the broker still has it uncommitted, so it is read
  again after a restart (at-least-once delivery; duplicates of *events* are
  prevented by their idempotency key, not here).
* ``advance`` can be slow (a DLQ delivery, a commit round trip). It is called
  per lane, so a slow lane never delays another one.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

PayloadT = TypeVar("PayloadT")


@dataclass(frozen=True, slots=True)
class AdvanceOutcome:
    """What the cohort did with one message.

    ``acked``: watchers whose filter moved past the message and whose unit of work
    committed (or who deliberately filtered it out).
    ``failed``: watchers that raised, timed out, or were absent; the message is held
    for them and redelivered after ``retry_after`` seconds.
    ``rejected``: watcher name -> reason; the message goes to the dead-letter topic
    (or the ``rejected_message`` table) before anything commits past it.
    """

    acked: frozenset[str] = frozenset()
    failed: frozenset[str] = frozenset()
    rejected: Mapping[str, str] = field(default_factory=dict)
    retry_after: float = 0.0

    @property
    def is_clean(self) -> bool:
        """True when nothing failed: the message is terminal once rejections are delivered."""
        return not self.failed

    @property
    def watchers(self) -> frozenset[str]:
        return self.acked | self.failed | frozenset(self.rejected)


@dataclass(frozen=True, slots=True)
class AdvanceItem(Generic[PayloadT]):
    """One resolved message of a lane, in broadcast order."""

    broker_payload: PayloadT
    outcome: AdvanceOutcome


class SharedStreamProducer(abc.ABC, Generic[PayloadT]):
    """Broker side of one shared-stream group.

    Implementations must be safe to drive from a single asyncio event loop; any
    blocking client work belongs on the producer's own thread, never on the loop.
    """

    @abc.abstractmethod
    def open_stream(self) -> AsyncIterator[tuple[Any, PayloadT]]:
        """Yield ``(raw, broker_payload)`` for the life of the group.

        ``raw`` is what watchers' filters receive (``KafkaMessage`` for Kafka);
        ``broker_payload`` is what comes back in :class:`AdvanceItem`. Returning
        is an error: the manager evicts the group and fails every watcher.
        """

    @abc.abstractmethod
    async def advance(self, batch: Sequence[AdvanceItem[PayloadT]]) -> None:
        """Take one lane's contiguous resolved prefix (never empty, broadcast order).

        Raising terminates the group: the manager logs it and fails every watcher.
        """

    @abc.abstractmethod
    def get_advance_lane(self, payload: PayloadT) -> Hashable:
        """The ordering lane of a message (Kafka: ``(topic, partition)``). Sync and cheap."""

    @abc.abstractmethod
    def message_identity(self, payload: PayloadT) -> Hashable:
        """A stable identity, so a re-read copy of a message is recognised as the same one."""

    def targets(self, payload: PayloadT) -> frozenset[str] | None:
        """Watchers a message is addressed to, or None for the whole cohort.

        A replayed dead letter names the watchers that rejected it; everything
        else goes to the whole cohort.
        """
        return None

    @abc.abstractmethod
    def pause(self) -> None:
        """Stop fetching new messages (in-flight bound reached); stay a live group member."""

    @abc.abstractmethod
    def resume(self) -> None:
        """Fetch again after :meth:`pause`."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Release the connection. Best effort; the manager calls it exactly once."""

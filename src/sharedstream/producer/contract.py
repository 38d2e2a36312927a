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

Throughput: messages cross this boundary in batches (``open_stream`` yields
lists, ``advance`` takes one lane's prefix), so the per-message cost on the
event loop stays a few attribute lookups, never a thread hop or a Future.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, TypeVar

PayloadT = TypeVar("PayloadT")


@dataclass(frozen=True, slots=True)
class AdvanceOutcome:
    """What the cohort did with one message.

    ``acked``: watchers whose filter moved past the message and whose unit of work
    committed (or who deliberately filtered it out).
    ``failed``: watchers that raised, timed out, were absent, or whose unit of work
    failed; the message is held for them (the lane's floor) and the producer reads it
    again after ``retry_after`` seconds. The manager remembers who already acked or
    rejected it, so the re-read copy goes only to the failed watchers.
    ``rejected``: watcher name -> reason; the message goes to the dead-letter topic
    (or the ``rejected_message`` table) before anything commits past it.

    ``acked`` and ``rejected`` are cumulative over every delivery of the message in
    this process; ``failed`` is what is still outstanding. A message can therefore be
    advanced several times (once per delivery round) and only the last, clean one is
    terminal: deliver its dead letter (one record naming every rejecting watcher) then.
    Outcomes are immutable and may be shared between messages.
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


class AdvanceItem(NamedTuple, Generic[PayloadT]):
    """One resolved message of a lane, in broadcast order (a NamedTuple: built per message)."""

    broker_payload: PayloadT
    outcome: AdvanceOutcome


class ForgetLanes(NamedTuple):
    """Yielded by :meth:`SharedStreamProducer.open_stream` instead of a batch.

    Tells the manager the producer no longer owns these lanes (Kafka: partitions
    revoked or lost): the manager drops every in-flight and held message of them,
    skips their queued copies, and ignores late acks. Nothing of these lanes is
    passed to ``advance`` after this item is consumed. A producer that must commit
    the resolved prefix first (revoke) already has it: the manager hands every
    resolved prefix to ``advance`` as soon as it exists.
    """

    lanes: frozenset[Hashable]


StreamItem = Sequence[tuple[Any, PayloadT]] | ForgetLanes


class SharedStreamProducer(abc.ABC, Generic[PayloadT]):
    """Broker side of one shared-stream group.

    Implementations must be safe to drive from a single asyncio event loop; any
    blocking client work belongs on the producer's own thread, never on the loop.
    """

    @abc.abstractmethod
    def open_stream(self) -> AsyncIterator[StreamItem[PayloadT]]:
        """Yield batches of ``(raw, broker_payload)`` for the life of the group.

        ``raw`` is what watchers' filters receive (``KafkaMessage`` for Kafka);
        ``broker_payload`` is what comes back in :class:`AdvanceItem`. Yield one
        batch per ``consume()`` call (empty batches are allowed but pointless), or a
        :class:`ForgetLanes`. A held message read again (same
        :meth:`message_identity`) is redelivered to the watchers that still owe it;
        a copy read while the original is still in flight is dropped. Returning
        or raising is an error: the manager evicts the group and fails every watcher.
        """

    @abc.abstractmethod
    async def advance(self, batch: Sequence[AdvanceItem[PayloadT]]) -> None:
        """Take one lane's contiguous resolved prefix (never empty, broadcast order).

        Raising terminates the group: the manager logs it and fails every watcher.
        """

    @abc.abstractmethod
    def get_advance_lane(self, payload: PayloadT) -> Hashable:
        """The ordering lane of a message (Kafka: ``(topic, partition)``). Sync and cheap.

        Raising fails the group.
        """

    @abc.abstractmethod
    def message_identity(self, payload: PayloadT) -> Hashable:
        """A stable identity, so a re-read copy of a message is recognised as the same one.

        It names where the record was read (Kafka: topic id, partition, offset), never
        what it stands for: two records that carry one replayed dead letter are two
        messages, each of which must resolve, or the lane's commit stalls behind the
        one the manager dropped.
        """

    def targets(self, payload: PayloadT) -> frozenset[str] | None:
        """Watchers a message is addressed to, or None for the whole cohort.

        A replayed dead letter names the watchers that rejected it; everything
        else goes to the whole cohort.
        """
        return None

    def bound_lanes(self, max_in_flight: int, max_bytes: int | None = None) -> None:
        """Cap each lane at ``max_in_flight`` messages read above its floor, and at
        ``max_bytes`` of payload of its unresolved messages.

        The manager's own bound counts what it tracks (in flight and held); a producer
        that remembers every message read above a held one (for commits) must stop
        reading that lane at this bound, or one held message makes memory grow with the
        log; and a few large messages must not fill memory before the count is reached.
        Called once, before ``open_stream``. The default keeps no such memory.
        """

    @abc.abstractmethod
    def pause(self) -> None:
        """Stop fetching new messages (in-flight bound reached); stay a live group member.

        Held messages count towards the bound, so re-reading them after their
        ``retry_after`` must continue while paused (only reading *past* what was
        already handed out stops); otherwise a held group could never drain.
        Batches already fetched may still be yielded after ``pause``. Sync and cheap.
        """

    @abc.abstractmethod
    def resume(self) -> None:
        """Fetch again after :meth:`pause`. Sync and cheap; called only after ``pause``."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Release the connection. Best effort; the manager calls it exactly once."""

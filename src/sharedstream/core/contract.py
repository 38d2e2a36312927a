"""The contract between a shared-stream group and its broker adapter.

The adapter owns exactly one broker connection for one group. It is deliberately
thin: it reads, and does what the group's ledger asks. Everything known per message
lives in the ledger (:mod:`sharedstream.core.ledger`), which the group owns.

* The adapter yields what it reads and what happened to its partitions
  (:class:`Records`, :class:`PartitionsStarted`, :class:`PartitionsEnded`,
  :class:`PartitionRewound`),
  in the order it saw them, so a record always meets the ledger of its own generation.
* The group admits records into the ledger, fans them out, resolves them, and every
  ``commit_interval`` hands the adapter the commit targets of what changed
  (:meth:`SharedStreamProducer.publish`).
* The ledger asks the adapter to pause a partition at its bound, or to seek it back
  and resume it (:meth:`SharedStreamProducer.request_fetch`).
* A rejected message is dead-lettered by the adapter
  (:meth:`SharedStreamProducer.dead_letter`); it tells the group, on the event loop,
  once the dead letter is durable.

Failure windows the contract is built around:

* The process can die at any point after a message was handed out and before its
  commit target was committed: the broker still has it uncommitted, so it is read
  again after a restart (at-least-once delivery; duplicates of *events* are
  prevented by their idempotency key, not here).
* A revocation must not commit less than what resolved: the adapter reads the
  ledger's targets itself (:meth:`Ledger.publish`, on the loop) before it commits
  the revoked partitions, so it is handed the ledger in :meth:`open_stream`.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar

from sharedstream.core.backpressure import PauseReason
from sharedstream.core.counters import AdapterCounters
from sharedstream.core.ledger import Key, Ledger, PartitionLedger, PartitionLoad, Target

PayloadT = TypeVar("PayloadT")


class Records(NamedTuple, Generic[PayloadT]):
    """Records read, as ``(raw, payload)``: ``raw`` is what filters receive
    (``KafkaMessage``), ``payload`` the ledger record (``KafkaPayload``).

    ``items`` may be a :class:`~sharedstream.core.reads.ReadBatch` (the Kafka adapter's):
    the same pairs to a reader, kept as runs of one partition's reads that are their own
    payload, with their bytes summed, so the ledger admits a run at once."""

    items: Sequence[tuple[Any, PayloadT]]


class PartitionsStarted(NamedTuple):
    """Partitions assigned: ``(topic, partition, committed offset or None, terminal
    offsets remembered above it)`` for one assignment generation, and per partition the
    holds remembered above it (offset -> the watchers that still owe it:
    :mod:`sharedstream.core.holds`)."""

    generation: int
    starts: tuple[tuple[str, int, int | None, frozenset[int]], ...]
    held: Mapping[Key, Mapping[int, frozenset[str]]] = {}


class PartitionsEnded(NamedTuple):
    """These partitions left the consumer (revoked, lost, or their topic recreated)."""

    keys: frozenset[Key]


class PartitionRewound(NamedTuple):
    """A bounded partition was sought back to where its ledger stopped admitting:
    everything read after this comes from there."""

    key: Key
    generation: int


StreamEvent = Records[PayloadT] | PartitionsStarted | PartitionsEnded | PartitionRewound


@dataclass(frozen=True, slots=True)
class AdapterHealth:
    """What readiness, ``/status`` and ``/metrics`` know of an adapter (:meth:`health`).

    ``ready`` is False after a transient broker error until the broker answers again,
    and once the adapter failed (``failed`` says why); ``paused`` while it fetches
    nothing new for the group (held back or paused).
    """

    ready: bool
    assigned_partitions: int
    held_messages: int
    paused: bool
    last_error: str | None
    failed: str | None
    # Seconds the adapter has owned no partition (None: it owns some, or cannot tell), and
    # how long a member that stopped without leaving keeps them (the session timeout).
    waiting_for_partitions: float | None = None
    session_timeout: float | None = None

    def problem(self) -> str | None:
        """Readiness's reason, or None when ready."""
        if self.ready:
            return None
        return "broker not reachable" + (f" ({self.last_error})" if self.last_error else "")


class PartitionStats(NamedTuple):
    """The broker's figures of one assigned partition (librdkafka's statistics)."""

    lag: int
    commit_lag: int
    paused: bool
    committed: int = -1  # the committed offset (-1: none yet)
    position: int = -1  # the next offset handed to the application (-1: unknown)
    end: int = -1  # the log end offset (-1: unknown)


class SharedStreamProducer(abc.ABC, Generic[PayloadT]):
    """Broker side of one shared-stream group.

    Implementations must be safe to drive from a single asyncio event loop; any
    blocking client work belongs on the adapter's own thread, never on the loop.
    """

    #: How often the group publishes commit targets (seconds).
    commit_interval: float = 0.1
    #: Whether the group also publishes them at the end of a step that left it nothing in
    #: flight (caught up: nothing would change them before the next interval).
    commit_when_idle: bool = True

    @abc.abstractmethod
    def open_stream(self, ledger: Ledger) -> AsyncIterator[StreamEvent[PayloadT]]:
        """Yield what is read for the life of the group.

        ``ledger`` is the group's: the adapter reads its snapshot for health and its
        commit targets when it must commit at once (revocation, close). Returning or
        raising is an error: the group is evicted and every watcher failed.
        """

    @abc.abstractmethod
    def publish(self, targets: Mapping[Key, Target]) -> None:
        """Commit targets per partition, ``(generation, offset, terminal offsets above)``;
        committed on the adapter's next commit tick. Sync and cheap."""

    @abc.abstractmethod
    def request_fetch(self, key: Key, generation: int, seek_to: int | None) -> None:
        """Pause a partition (``seek_to`` None) or seek it to ``seek_to`` and resume it,
        then yield :class:`PartitionRewound`. Ignored for another generation. Sync and cheap."""

    def record_skipped(self, ledger: PartitionLedger, offset: int) -> None:
        """A record below the committed position was read (a recreated topic?)."""

    @abc.abstractmethod
    def dead_letter(self, payload: PayloadT, rejections: dict[str, str],
                    done: Callable[[], None]) -> None:
        """Deliver a rejected message's dead letter (one record naming every rejecting
        watcher); call ``done`` on the event loop once it is durable. Retries are the
        adapter's: a dead letter is never given up."""

    @abc.abstractmethod
    def size(self, raw: Any) -> int:
        """Bytes a handed-out message holds in memory (for ``max_in_flight_bytes``)."""

    @abc.abstractmethod
    def pause(self) -> None:
        """Stop fetching new messages (in-flight bound reached); stay a live group member.

        Batches already fetched may still be yielded after ``pause``. Sync and cheap.
        """

    @abc.abstractmethod
    def resume(self) -> None:
        """Fetch again after :meth:`pause`. Sync and cheap; called only after ``pause``."""

    # -- observability: safe from any thread (the health server's, a scrape's) ----------
    # The defaults suit an adapter with no broker connection of its own (always ready,
    # nothing counted); the Kafka adapter overrides every one.

    def health(self) -> AdapterHealth:
        """A snapshot for readiness, ``/status`` and ``/metrics``."""
        return AdapterHealth(True, 0, 0, False, None, None)

    def counters(self) -> AdapterCounters:
        """A copy of the adapter's counters."""
        return AdapterCounters()

    def partition_stats(self) -> Mapping[Key, PartitionStats]:
        """The broker's figures per assigned partition, as last reported."""
        return {}

    def floor_distances(self) -> Mapping[Key, PartitionLoad]:
        """Per partition: its load against its bounds, as of the ledger's last publish."""
        return {}

    def paused_partitions(self) -> Mapping[Key, PauseReason]:
        """Every assigned partition that does not fetch, and why."""
        return {}

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Deliver what is delivering, commit the ledger's targets, release the connection.
        Best effort; called exactly once."""

"""What the consumer thread's loop and its rebalance callbacks share: the thread's state
and the commit, pause and close operations both need.

Everything here runs on the consumer thread. What crosses to the loop goes through the
:class:`~sharedstream.kafka.handoff.HandOff`; the commit driver
(:class:`~sharedstream.kafka.commits.CommitDriver`) says what to commit and this sends it.
Layers, each importing only the one before: this module, kafka/rebalance.py (the
callbacks), kafka/consumer_thread.py (the loop).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    KafkaError,
    KafkaException,
    TopicPartition,
)

from sharedstream.core.backpressure import Backpressure, PauseReason
from sharedstream.core.counters import AdapterCounters
from sharedstream.core.holds import HoldStore
from sharedstream.core.ledger import Key
from sharedstream.kafka.commits import CommitDriver
from sharedstream.kafka.dead_letters import DeadLetterSender
from sharedstream.kafka.handoff import ConsumerState, HandOff
from sharedstream.kafka.logs import RepeatFilter
from sharedstream.kafka.membership import fenced, fenced_error, is_fatal
from sharedstream.kafka.payload import FirstRead, KafkaPayload
from sharedstream.kafka.topic_watch import TopicWatch

# Commit answers that mean "a rebalance overtook this request", retried afterwards.
REBALANCE_ERRORS = frozenset(
    {KafkaError.ILLEGAL_GENERATION, KafkaError.REBALANCE_IN_PROGRESS, KafkaError.UNKNOWN_MEMBER_ID}
)

_BROKER_LOG = logging.getLogger("sharedstream.kafka.consumer.broker")
_BROKER_LOG.addFilter(RepeatFilter())

# A consumer with no partition this long says so in the log (``/status`` at once).
WAIT_NOTE_S = 5.0

# Loop callbacks the thread waits for: settle(keys, until, done) and publish(done).
Settle = Callable[[frozenset[Key], float, threading.Event], None]
PublishNow = Callable[[threading.Event], None]


class ConsumerSettings:
    """What the thread needs of the adapter's configuration (read-only, set before the
    thread starts)."""

    def __init__(self, *, config: Mapping[str, Any], consumer_group: str,
                 topics: tuple[str, ...], replay_topic: str | None, batch_size: int,
                 consume_timeout: float, commit_interval: float, revoke_timeout: float,
                 consumer_factory: Callable[[dict[str, Any]], Any],
                 dlq_producer_factory: Callable[[dict[str, Any]], Any],
                 holds: HoldStore | None = None, instance_id: str | None = None,
                 instance_origin: str = "", leave_on_close: bool = True) -> None:
        self.config = config
        self.consumer_group = consumer_group
        self.topics = topics
        self.replay_topic = replay_topic
        self.read_topics = topics if replay_topic is None else (*topics, replay_topic)
        self.batch_size = batch_size
        self.consume_timeout = consume_timeout
        self.commit_interval = commit_interval
        self.revoke_timeout = revoke_timeout
        self.consumer_factory = consumer_factory
        self.dlq_producer_factory = dlq_producer_factory
        self.holds = holds  # read on assignment (core/holds.py); None: none kept
        # Static membership (kafka/membership.py): the id joined with, what set it.
        self.instance_id = instance_id
        self.instance_origin = instance_origin
        self.leave_on_close = leave_on_close
        # How long a member that stopped without leaving keeps its partitions (seconds):
        # the broker's group.consumer.session.timeout.ms under KIP-848, 45 s by default.
        self.session_timeout = float(config.get("session.timeout.ms", 45000)) / 1000
        self.reset_offset = reset_offset(config)
        protocol = str(config.get("group.protocol", "classic")).lower()
        strategy = str(config.get("partition.assignment.strategy", "cooperative-sticky"))
        self.incremental = protocol == "consumer" or "cooperative" in strategy


def reset_offset(config: Mapping[str, Any]) -> int:
    """Where ``auto.offset.reset`` starts a partition never committed, as a logical
    offset; OFFSET_INVALID (librdkafka decides) for a value it alone knows (``error``)."""
    reset = str(config.get("auto.offset.reset", "latest")).lower()
    if reset in ("earliest", "smallest", "beginning"):
        return OFFSET_BEGINNING
    if reset in ("latest", "largest", "end"):
        return OFFSET_END
    return OFFSET_INVALID


class ConsumerCore:
    """The consumer thread's state, and what both its loop and its rebalance callbacks
    do: commit, pause or resume the assignment, close."""

    def __init__(self, settings: ConsumerSettings, hand: HandOff[KafkaPayload],
                 backpressure: Backpressure, watch: TopicWatch,
                 sender: DeadLetterSender | None, settle: Settle, publish_now: PublishNow,
                 log: logging.LoggerAdapter[logging.Logger]) -> None:
        self.s = settings
        self.hand = hand
        self.bp = backpressure
        self.watch = watch
        self.sender = sender
        self._settle = settle
        self._publish_now = publish_now
        self.log = log
        # The generation of each owned partition; the commit driver reads it.
        self.owned: dict[Key, int] = {}
        self.generation = 0
        self.commits = CommitDriver(self.owned)
        # Each partition's class of first reads, of the generation it was last read in.
        self.read_as: dict[Key, type[FirstRead]] = {}
        self._wait_noted = False

    # -- pausing the assignment --------------------------------------------------------

    def set_paused(self, consumer: Any, reason: PauseReason | None) -> None:
        """Pause the assignment (for ``reason``) or resume it; a partition at its own
        bound stays paused until its ledger lifts the bound."""
        paused = reason is not None
        assignment = consumer.assignment()
        if assignment and not paused:
            keep = set(self.bp.resumable((tp.topic, tp.partition) for tp in assignment))
            assignment = [tp for tp in assignment if (tp.topic, tp.partition) in keep]
        if assignment:
            (consumer.pause if paused else consumer.resume)(assignment)
        self.bp.applied(reason)
        self.publish_paused()

    def publish_paused(self) -> None:
        """Show what does not fetch now: the status's one record of it."""
        self.hand.status.set_pauses(self.bp.pauses(self.owned))

    # -- commits: the driver decides, this sends ---------------------------------------

    def commit(self, consumer: Any, *, synchronous: bool,
               only: frozenset[Key] | None = None) -> None:
        """One commit request for what the driver says (see kafka/commits.py); a
        synchronous one raises ``KafkaException`` when the broker refuses it."""
        self.commits.take(self.hand.outbox.take_published())
        requests = self.commits.requests(synchronous=synchronous, only=only)
        if not requests:
            return
        offsets = [TopicPartition(key[0], key[1], offset, metadata=metadata)
                   for key, (offset, metadata) in requests]
        try:
            result = consumer.commit(offsets=offsets, asynchronous=not synchronous)
        except KafkaException as exc:
            self._commit_failed(offsets, exc.args[0])
            if synchronous:
                raise
            return
        if synchronous and result:
            self._on_commit(None, result)

    def _on_commit(self, error: KafkaError | None, partitions: list[TopicPartition]) -> None:
        failed = [tp for tp in partitions if tp.error is not None]
        if error is None:
            for tp in partitions:
                if tp.error is None:
                    self.commits.confirmed((tp.topic, tp.partition),
                                           (tp.offset, tp.metadata or ""))
        if error is not None or failed:
            first = error if error is not None else failed[0].error
            assert first is not None
            self._commit_failed(failed or partitions, first)
        else:
            self.hand.status.count(_committed)
            self.hand.status.set_ready()

    def _commit_failed(self, partitions: Sequence[TopicPartition], error: KafkaError) -> None:
        """Send them again; shrink the metadata if the broker found it too long."""
        self.hand.status.count(_commit_failed)
        too_large = error.code() == KafkaError.OFFSET_METADATA_TOO_LARGE
        keys = [(tp.topic, tp.partition) for tp in partitions]
        self.commits.refused(keys, metadata_too_large=too_large)
        group = self.s.consumer_group
        if too_large:
            self.log.warning("%s: broker refused commit metadata; remembering at most %d chars",
                             group, self.commits.metadata_max_chars)
        elif error.code() in REBALANCE_ERRORS:
            # The group moved to a new generation under this request; the partitions still
            # owned are sent again next tick; those gone were committed when they went.
            owned = any(key in self.owned for key in keys)
            self.log.log(logging.INFO if owned else logging.DEBUG,
                         "%s: commit %s by a rebalance: %s", group,
                         "deferred" if owned else "of partitions already gone refused",
                         error.str())
        else:
            self.hand.status.note_error(f"commit failed: {error.str()}")
            self.log.warning("%s: commit failed: %s", group, error.str())

    # -- broker health -----------------------------------------------------------------

    def _on_error(self, error: KafkaError) -> None:
        if is_fatal(error):
            self.hand.fail(self.fatal(error))
            return
        self.hand.status.note_error(error.str())
        # A broker that is down fails every connection attempt (tens a second): readiness
        # says so at once, the log once a minute (with how many it held back).
        _BROKER_LOG.warning("%s: broker error: %s", self.s.consumer_group, error.str(),
                            extra={"group": self.s.consumer_group})

    # -- waiting for partitions --------------------------------------------------------

    def unassigned(self, now: float) -> None:
        """Each turn while the consumer owns no partition: ``/status`` shows the wait from
        its start, the log once it outlasts ``WAIT_NOTE_S`` (a join takes well under
        that; a previous member that did not leave holds them for its session)."""
        since = self.hand.status.waiting_since
        if since is None:
            self.hand.status.set_waiting(now)
        elif not self._wait_noted and now - since >= WAIT_NOTE_S:
            self._wait_noted = True
            self.log.warning(
                "%s: waiting for partitions for %.0fs: the broker still assigns them to a "
                "previous member that stopped without leaving the group (a crash), until "
                "its session times out (session.timeout.ms, %gs), or other members hold "
                "them all", self.s.consumer_group, now - since, self.s.session_timeout)

    def assigned(self, now: float) -> None:
        """Partitions came: the wait, if one was logged, ends with a line saying how long."""
        since = self.hand.status.waiting_since
        if since is not None and self._wait_noted:
            self.log.info("%s: partitions assigned after waiting %.1fs",
                          self.s.consumer_group, now - since)
        self.hand.status.set_waiting(None)
        self._wait_noted = False

    def fatal(self, error: KafkaError) -> Exception:
        """What a fatal consumer error fails the group with: a fenced static member names
        the setting that gives each process its own identity."""
        if fenced(error) and self.s.instance_id is not None:
            return fenced_error(self.s.consumer_group, self.s.instance_id,
                                self.s.instance_origin)
        return KafkaException(error)

    def _probe(self, consumer: Any) -> None:
        try:
            consumer.list_topics(self.s.topics[0], timeout=1.0)
        except KafkaException:
            return
        self.hand.status.set_ready()

    def close_quietly(self, consumer: Any) -> None:
        try:
            consumer.close()
        except (KafkaException, RuntimeError) as exc:
            self.log.warning("%s: close failed: %s", self.s.consumer_group, exc)

    @property
    def closing(self) -> bool:
        return self.hand.state is ConsumerState.CLOSING




def _committed(c: AdapterCounters, n: int) -> None:
    c.commits += n


def _commit_failed(c: AdapterCounters, n: int) -> None:
    c.commit_failures += n



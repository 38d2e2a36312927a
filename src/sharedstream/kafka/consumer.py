"""``KafkaSharedConsumer``: one Kafka consumer for one shared-stream group (the adapter).

``KafkaSharedStreamProducer``, the public name taken from Airflow, is the same class
(kafka/producer.py). The adapter is in parts with one job each:

* this class, on the event loop: the contract (core/contract.py), health and counters;
* :class:`~sharedstream.kafka.handoff.HandOff`: the only object both threads touch
  (the consumer state, holding the inbox, the outbox and the status);
* the consumer thread (kafka/consumer_thread.py) and its rebalance callbacks
  (kafka/rebalance.py), over what they share (kafka/consumer_core.py);
* the commit driver, no I/O (kafka/commits.py);
* the backpressure decision (core/backpressure.py);
* the topic-identity watch (kafka/topic_watch.py);
* the dead-letter outbox: sender retries and the rejection recorder
  (kafka/dead_letter_outbox.py over kafka/dead_letters.py).

The consumer thread keeps no per-message state: it wraps what it reads and hands each
batch to the loop in one hop. The loop owns the ledger, the only per-offset
bookkeeping: it admits records, resolves outcomes, decides the bounds, and every
``commit_interval`` publishes the targets of the partitions that changed.

Failure windows:

* Crash after a message was handed out, before its outcome is committed: the broker
  still has the old committed offset; the message is read again. Terminal offsets above
  the commit are carried in commit metadata, so only messages resolved within the last
  commit interval (100 ms) are handed out again.
* Crash after a dead-letter record was delivered, or a rejection row stored, before the
  commit: produced or recorded again after restart (same identity).
* Revocation, loss and close: kafka/rebalance.py.
* A watched or dead-letter topic recreated under the consumer: kafka/topic_watch.py.
* A partition at its bound (``max_in_flight`` offsets resolved or held above its floor,
  or ``max_in_flight_bytes`` unresolved) is paused; the consumer may have read a few
  batches further before the pause lands: the ledger discards those and the partition
  is sought back to them on resume.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer

from sharedstream.core.backpressure import Backpressure, PauseReason, bound_reason
from sharedstream.core.contract import (
    AdapterHealth,
    PartitionStats,
    SharedStreamProducer,
    StreamEvent,
)
from sharedstream.core.counters import AdapterCounters
from sharedstream.core.holds import HoldStore
from sharedstream.core.ledger import Key, Ledger, PartitionLedger, PartitionLoad, Target
from sharedstream.core.message import KafkaMessage
from sharedstream.kafka.connections import consumer_group_id, producer_config, validate_connection
from sharedstream.kafka.consumer_core import ConsumerSettings
from sharedstream.kafka.consumer_thread import ConsumerThread
from sharedstream.kafka.dead_letter_outbox import DeadLetterOutbox
from sharedstream.kafka.dead_letters import DeadLetterSender
from sharedstream.kafka.handoff import ConsumerState, HandOff, StreamNotOpenError
from sharedstream.kafka.lag import LagProbe
from sharedstream.kafka.membership import StaticMembership
from sharedstream.kafka.payload import KafkaPayload
from sharedstream.kafka.rejections import RejectionRecorder
from sharedstream.kafka.replay_topic import ensure_replay_topic
from sharedstream.kafka.topic_ids import TopicIdResolver, describe_topic_ids
from sharedstream.kafka.topic_watch import TopicWatch

log = logging.getLogger(__name__)  # sharedstream.kafka.consumer: every part of the adapter

# How often the watched topics' ids are compared with the broker's (kafka/topic_watch.py).
TOPIC_ID_CHECK_S = 5.0
SETTLE_POLL_S = 0.005  # how often a revoke looks whether the watchers are done


class StreamFailedError(RuntimeError):
    """The group's consumer hit a fatal error; the manager evicts the group."""


class KafkaSharedConsumer(SharedStreamProducer[KafkaPayload]):
    """Broker side of one Kafka shared-stream group (see module docstring).

    ``config`` is a connection config (:func:`resolve_connection`); it is validated
    again here so no consumer can exist with auto-commit on. The consumer group is
    ``<group.id>.<sorted topics joined by +>``.
    """

    def __init__(
        self,
        *,
        topics: Sequence[str],
        config: Mapping[str, Any],
        recorder: RejectionRecorder | None,
        connection_id: str = "kafka_default",
        dlq_topic: str | None = None,
        replay_topic: str | None = None,
        poll_timeout: float = 1.0,
        batch_size: int = 1000,
        commit_interval: float = 0.1,
        revoke_timeout: float = 10.0,
        max_backlog: int | None = None,
        pause_after: float = 1.0,
        consumer_factory: Callable[[dict[str, Any]], Any] = Consumer,
        dlq_producer_factory: Callable[[dict[str, Any]], Any] = Producer,
        topic_id_resolver: TopicIdResolver = describe_topic_ids,
        topic_id_check_interval: float = TOPIC_ID_CHECK_S,
        holds: HoldStore | None = None,
        membership: StaticMembership | None = None,
    ) -> None:
        self.topics = tuple(sorted(set(topics)))
        if not self.topics:
            raise ValueError("a shared-stream consumer needs at least one topic")
        self.connection_id = connection_id
        self._config = validate_connection(connection_id, config)
        self.consumer_group = consumer_group_id(self._config, self.topics)
        # Every line names the group; --log-format json carries it as a field too.
        self._log = logging.LoggerAdapter(log, {"group": self.consumer_group})
        self.dlq_topic = dlq_topic
        # Read besides the watched topics, never part of the consumer group's name: the
        # replays of this group's dead letters (kafka/replay_topic.py).
        self.replay_topic = replay_topic
        self.commit_interval = commit_interval
        self._revoke_timeout = revoke_timeout
        self._recorder = recorder
        membership = membership or StaticMembership()
        self._settings = ConsumerSettings(
            config=self._config, consumer_group=self.consumer_group, topics=self.topics,
            instance_id=membership.instance_id(self.consumer_group, self._config),
            instance_origin=membership.origin(self._config),
            leave_on_close=membership.leave_on_close,
            replay_topic=replay_topic, batch_size=batch_size,
            consume_timeout=max(0.001, min(poll_timeout, commit_interval)),
            commit_interval=commit_interval, revoke_timeout=revoke_timeout,
            consumer_factory=consumer_factory, dlq_producer_factory=dlq_producer_factory,
            holds=holds)
        self._max_backlog = max_backlog
        self._pause_after = pause_after
        self._watch = TopicWatch(topic_id_resolver, self._config, self._settings.read_topics,
                                 topic_id_check_interval, self._log, self.consumer_group)
        self._hand: HandOff[KafkaPayload] = HandOff()
        self._lag = LagProbe(self._config, self.consumer_group)
        self._ledger: Ledger | None = None
        self._outbox: DeadLetterOutbox | None = None
        self._thread: threading.Thread | None = None
        self._worker: ConsumerThread | None = None

    # -- contract ----------------------------------------------------------------------

    async def open_stream(self, ledger: Ledger) -> AsyncIterator[StreamEvent[KafkaPayload]]:
        """Start the consumer thread; yield one ``Records`` per ``consume()`` and the
        partitions' starts, ends and rewinds, in the order the consumer saw them.

        Topic ids are resolved first: an event identity without its topic id could not
        tell a recreated topic from the old one (guarantee 2).
        """
        if self._thread is not None or self._hand.state is not ConsumerState.STARTING:
            raise RuntimeError("open_stream() may be called once per consumer")
        loop = asyncio.get_running_loop()
        self._ledger = ledger
        self._hand.inbox.attach(loop)
        s = self._settings
        if self.replay_topic is not None and self.dlq_topic is not None:
            await asyncio.to_thread(ensure_replay_topic, self._config, self.dlq_topic)
        # The DLQ topic's id too: its recreation is watched like a watched topic's.
        watched = s.read_topics if self.dlq_topic is None else (*s.read_topics,
                                                                  self.dlq_topic)
        self._watch.ids = await asyncio.to_thread(self._watch.resolve, watched)
        # The producer is no local: this frame lives as long as the stream, and the sender
        # alone must hold it so that closing it destroys it (DeadLetterSender.close).
        sender = None if self.dlq_topic is None else DeadLetterSender(
            s.dlq_producer_factory(producer_config(self._config)), self.dlq_topic,
            self.consumer_group)
        self._outbox = DeadLetterOutbox(sender=sender, recorder=self._recorder,
                                        status=self._hand.status, ledger=ledger, loop=loop,
                                        consumer_group=self.consumer_group, log=self._log)
        # The loop backlog's bounds are the group's max_in_flight and max_in_flight_bytes
        # (one set of bounds, core/backpressure.py); a ledger without bounds (tests) gets
        # eight batches.
        backlog = self._max_backlog or ledger.bound or 8 * s.batch_size
        backpressure = Backpressure(backlog, ledger.bytes_bound, self._pause_after)
        self._worker = worker = ConsumerThread(s, self._hand, backpressure, self._watch,
                                self._outbox.sender, self._settle, self._publish_now,
                                self._log)
        self._thread = threading.Thread(target=worker.run, daemon=True,
                                        name=f"sharedstream:{self.consumer_group}")
        self._thread.start()
        self._log.info("shared stream %s: consumer group %s", self.connection_id,
                       self.consumer_group)
        while True:
            event = await self._hand.inbox.next_event()
            if event is None:
                raise StreamFailedError(
                    f"consumer group {self.consumer_group} failed") from self._hand.failure
            yield event

    def request_fetch(self, key: Key, generation: int, seek_to: int | None) -> None:
        reason = None
        ledger = self._ledger
        if seek_to is None and ledger is not None and key in ledger.partitions:
            reason = bound_reason(ledger.partitions[key], ledger.bytes_bound)
        self._hand.outbox.request_fetch(key, (generation, seek_to, reason))

    def publish(self, targets: Mapping[Key, Target]) -> None:
        self._hand.outbox.publish(targets)

    def record_skipped(self, ledger: PartitionLedger, offset: int) -> None:
        """A record below the committed position: say so, and look for a recreated topic
        now. Nothing read is dropped without a log line (once per partition: a whole
        re-read log would otherwise log every record)."""
        if not ledger.below_base_reported:
            ledger.below_base_reported = True
            self._log.warning("%s: %s[%d]: skipping offset %d below the committed position %d "
                              "(checking whether the topic was recreated)", self.consumer_group,
                              ledger.topic, ledger.partition, offset, ledger.base)
        self._hand.outbox.check_ids_now()

    def dead_letter(self, payload: KafkaPayload, rejections: dict[str, str],
                    done: Callable[[], None]) -> None:
        """Produce the dead letter, retrying with backoff; a record the topic refuses for
        good (too large, for instance) goes to the rejection recorder instead."""
        if self._outbox is None:
            raise StreamNotOpenError("the shared stream is not open")
        self._outbox.send(payload, rejections, done)

    def size(self, raw: KafkaMessage) -> int:
        # ConsumerThread._hand_over sums the same per PartitionRun (keep them alike).
        return len(raw.value or b"") + len(raw.key or b"")

    def pause(self) -> None:
        self._hand.outbox.pause_group(True)

    def resume(self) -> None:
        self._hand.outbox.pause_group(False)

    async def aclose(self) -> None:
        """Drain rejections (bounded), deliver dead letters, commit, close the consumer."""
        self._lag.close()
        if not self._hand.close():
            return
        if self._outbox is not None:
            await self._outbox.aclose(self._revoke_timeout)
        if self._thread is not None:
            self._take_targets()  # the targets of the final commit
            await asyncio.to_thread(self._thread.join)
        self._hand.closed()

    # -- loop callbacks the consumer thread waits for (revocation, close) ---------------

    def _take_targets(self) -> None:
        if self._ledger is not None:
            targets = self._ledger.publish()
            if targets:
                self._hand.outbox.publish(targets)

    def _publish_now(self, done: threading.Event) -> None:
        self._take_targets()
        done.set()

    def _settle(self, keys: frozenset[Key], until: float, done: threading.Event) -> None:
        """Once the watchers resolved what they were handed of ``keys`` (or at ``until``),
        publish the targets and signal the consumer thread."""
        ledger = self._ledger
        if ledger is not None and time.monotonic() < until and ledger.handed_out(keys):
            asyncio.get_running_loop().call_later(SETTLE_POLL_S, self._settle, keys, until,
                                                  done)
            return
        self._publish_now(done)

    # -- observability (safe from any thread) -------------------------------------------

    @property
    def state(self) -> ConsumerState:
        return self._hand.state

    def health(self) -> AdapterHealth:
        """Reads the hand-off and the snapshot the loop refreshes as partitions change."""
        loads = {} if self._ledger is None else dict(self._ledger.loads)
        ready, last_error = self._hand.status.readiness()
        failure = self._hand.failure
        alive = self._thread is not None and self._thread.is_alive()
        since = self._hand.status.waiting_since
        return AdapterHealth(
            waiting_for_partitions=None if since is None or not alive
            else time.monotonic() - since,
            session_timeout=self._settings.session_timeout,
            ready=alive and ready and failure is None,
            assigned_partitions=len(loads),
            held_messages=sum(held for _, held in loads.values()),
            paused=self._hand.status.pauses.holding,
            last_error=last_error,
            failed=None if failure is None else str(failure))

    def counters(self) -> AdapterCounters:
        return self._hand.counters()

    def partition_stats(self) -> Mapping[Key, PartitionStats]:
        return self._hand.status.stats()

    def floor_distances(self) -> dict[Key, PartitionLoad]:
        """Per partition: messages read above the floor, bytes of the unresolved ones, and
        whether it is paused at its bound, as of the last publish (at most one commit
        interval old)."""
        if self._ledger is None:
            return {}
        return {key: load for key, (load, _) in dict(self._ledger.loads).items()}

    async def lag_now(self, request_timeout: float) -> int | None:
        """The lag of the partitions this consumer owns, asked of the broker now
        (kafka/lag.py: statistics can be minutes old); None when it owns none, or the
        broker did not answer within ``request_timeout``."""
        ledger = self._ledger
        if ledger is None or not ledger.partitions or not self._hand.live:
            return None
        try:
            return await asyncio.to_thread(self._lag.lag, sorted(ledger.partitions),
                                           request_timeout)
        except (KafkaException, TimeoutError) as exc:
            self._log.debug("%s: lag not read: %s", self.consumer_group, exc)
            return None

    def paused_partitions(self) -> Mapping[Key, PauseReason]:
        return self._hand.status.pauses.partitions

    async def commit(self) -> None:
        """Commit every partition's resolved prefix now and wait for the broker's answer.
        For tests and the bench; raises :class:`StreamNotOpenError` without a consumer."""
        thread, worker = self._thread, self._worker
        if thread is None or worker is None or not thread.is_alive() or not self._hand.live:
            raise StreamNotOpenError(f"no open consumer for group {self.consumer_group}")
        self._take_targets()
        await asyncio.wrap_future(self._hand.outbox.command(
            lambda consumer: worker.commit(consumer, synchronous=True)))

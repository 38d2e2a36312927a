"""The consumer thread: owns the ``Consumer``, reads batches, applies pauses, commits.

It keeps no per-message state. Each turn it runs what the loop asked (fetch requests,
the group's pause: the hand-off's outbox), reads one batch unless backpressure
holds it back (:class:`~sharedstream.core.backpressure.Backpressure` decides), wraps the
batch and posts it to the loop in one hop, polls the dead-letter sender (its reports
run here), sends the commit tick every ``commit_interval`` (the :class:`CommitDriver`
says what), probes a broker that erred, and runs the topic-identity watch.

Caught up, it commits what the loop published without waiting for the tick: the loop
publishes as soon as its group has nothing in flight (core/targets.py), and for one
``commit_interval`` after a hand-over the thread waits for records at most
``IDLE_COMMIT_S`` a turn, so those targets go out within about that, not up to two
intervals later; a turn that read nothing (caught up, not held back by backpressure)
commits what was published since, at most once per ``IDLE_COMMIT_S`` (a trickle of
single records is at most that many commits a second, as a consumer committing per batch
makes; under load the tick alone commits). The
rebalance callbacks (kafka/rebalance.py, the base class) run on this thread too,
inside ``consume()`` or ``close()``.

Failure windows: see kafka/consumer.py (the adapter's docstring lists them all).
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition

from sharedstream.core.backpressure import PauseReason
from sharedstream.core.contract import PartitionRewound, PartitionsEnded, PartitionsStarted, Records
from sharedstream.core.counters import AdapterCounters
from sharedstream.core.ledger import Key
from sharedstream.core.message import KafkaMessage
from sharedstream.core.reads import PartitionRun, ReadBatch
from sharedstream.kafka.connections import producer_config
from sharedstream.kafka.handoff import StreamNotOpenError
from sharedstream.kafka.logs import LIBRDKAFKA_LOGGER
from sharedstream.kafka.membership import InstanceFencedError, is_fatal
from sharedstream.kafka.payload import (
    FirstRead,
    KafkaPayload,
    build_payload,
    first_read_class,
    new_message,
)
from sharedstream.kafka.rebalance import Rebalancing
from sharedstream.kafka.stats import STATS_INTERVAL_MS, partition_stats
from sharedstream.kafka.topic_watch import Changes

PROBE_INTERVAL_S = 5.0
METADATA_REFRESH_MS = 5000
# Caught up after a hand-over: the longest wait for records a turn, and the least time
# between two commits made because the loop published (see the module docstring).
IDLE_COMMIT_S = 0.01


class ConsumerThread(Rebalancing):
    """The thread's loop (see module docstring).

    Bigger than 25 methods: with its base classes (``Rebalancing``: the callbacks
    ``subscribe()`` is given; ``ConsumerCore``: the consumer's state) it is everything
    that runs on the consumer thread, which librdkafka requires to be one thread and
    one consumer object; the split by file follows those three jobs.
    """

    # -- the loop ----------------------------------------------------------------------

    def run(self) -> None:
        s, hand = self.s, self.hand
        consumer: Any = None
        try:
            consumer = s.consumer_factory(self._consumer_config())
            consumer.subscribe(list(s.read_topics),
                               on_assign=self.on_assign, on_revoke=self.on_revoke,
                               on_lost=self.on_lost)
            hand.started()
            now = last_commit = last_probe = time.monotonic()
            draining_until = now  # short waits until then: the loop finishes a hand-over
            idle_wait = min(s.consume_timeout, IDLE_COMMIT_S)
            self.watch.start(last_commit)
            while hand.live:
                hand.outbox.run_commands(consumer)
                self._apply_fetches(consumer)
                records = None if self._hold_back(consumer) else consume_batch(
                    consumer, s.batch_size,
                    idle_wait if now < draining_until else s.consume_timeout)
                if self.sender is not None:
                    self.sender.poll()
                now = time.monotonic()
                if records:
                    self._hand_over(records)
                    draining_until = now + s.commit_interval
                if not self.owned:
                    self.unassigned(now)
                since = now - last_commit
                if since >= s.commit_interval or (  # caught up (read nothing, not held back)
                        records == [] and since >= IDLE_COMMIT_S and hand.outbox.has_published):
                    last_commit = now
                    self.commit(consumer, synchronous=False)
                if not hand.status.ready and now - last_probe >= PROBE_INTERVAL_S:
                    last_probe = now
                    self._probe(consumer)
                if hand.outbox.take_id_check():
                    self.watch.check_now()
                changed, dlq_change = self.watch.poll(now, self.sender)
                if changed or dlq_change is not None:
                    self._recreated(consumer, changed, dlq_change)
            self.watch.stop()
            self.shutdown(consumer)
            hand.closed()
        except InstanceFencedError as exc:  # the triggerer decides (FenceWatch)
            self.log.warning("%s: the broker fenced static member %r: this consumer cannot go "
                             "on (the group is rebuilt, or the process stops if another "
                             "process holds the identity)", s.consumer_group, exc.instance_id)
            hand.fail(exc)
            if consumer is not None:
                self.close_quietly(consumer)
        except BaseException as exc:
            self.log.exception("%s: consumer thread failed", s.consumer_group)
            hand.fail(exc)
            if consumer is not None:
                self.close_quietly(consumer)
        finally:
            if self.sender is not None:
                self.sender.close(s.revoke_timeout)
            hand.outbox.fail_commands(StreamNotOpenError("the consumer is closed"))

    def _consumer_config(self) -> dict[str, Any]:
        cfg = dict(self.s.config)
        cfg["group.id"] = self.s.consumer_group
        if self.s.instance_id is not None:
            cfg["group.instance.id"] = self.s.instance_id
        cfg["enable.partition.eof"] = False
        cfg.setdefault("logger", LIBRDKAFKA_LOGGER)
        cfg["error_cb"] = self._on_error
        cfg["on_commit"] = self._on_commit
        cfg.setdefault("topic.metadata.refresh.interval.ms", METADATA_REFRESH_MS)
        cfg.setdefault("statistics.interval.ms", STATS_INTERVAL_MS)
        if cfg["statistics.interval.ms"]:
            cfg["stats_cb"] = lambda text: self.hand.status.set_stats(partition_stats(text))
        if str(cfg.get("group.protocol", "classic")).lower() != "consumer":
            cfg.setdefault("partition.assignment.strategy", "cooperative-sticky")
        return cfg

    def _hand_over(self, records: list[Any]) -> None:
        """Wrap a consumed batch; one hop to the loop for the whole batch.

        Runs once per record: lookups are hoisted, a run of records of one partition
        (the usual shape of a batch) reuses its generation and its class of first reads,
        and a first read (nearly every record) is built right here, one tuple that is
        message and payload at once (kafka/payload.py), appended to its partition's
        :class:`PartitionRun` with its bytes (``KafkaSharedConsumer.size``, summed here so
        the loop weighs a run at once, and the batch's for the loop backlog's bound). A
        replayed dead letter is a pair of its own.
        """
        parts: list[PartitionRun | tuple[KafkaMessage, KafkaPayload]] = []
        owned, topic_ids, read_classes = self.owned, self.watch.ids, self.read_as
        replay_topic, topics = self.s.replay_topic, self.s.topics
        key: Key | None = None
        generation = -1
        watched: tuple[str, ...] = ()
        read_as: type[FirstRead] = FirstRead
        run: PartitionRun | None = None
        run_reads: list[Any] = []  # the current run's reads, and their append
        append = run_reads.append
        # The current run's last offset and bytes, kept local and written to it when it
        # ends (another partition, a replayed dead letter, an offset not rising, the end).
        last = size = 0
        n = 0  # records of the runs ended, and pairs
        for record in records:
            error = record.error()
            if error is not None:
                if is_fatal(error):
                    raise self.fatal(error)
                self.hand.status.note_error(f"consume error: {error.str()}")
                continue
            topic, partition = record.topic(), record.partition()
            if key is None or key[1] != partition or key[0] != topic:
                key = (topic, partition)
                generation = owned.get(key, -1)
                if run is not None:
                    run.last, run.size, run = last, size, None
                    n += len(run_reads)
                if generation < 0:
                    continue  # not owned in this generation (raced a revocation)
                watched = topics if topic == replay_topic else ()
                topic_id = topic_ids.get(topic, "")
                found = read_classes.get(key)
                # A new class once an id is learnt too: a topic the start-up resolve did
                # not answer for is read with no id until the topic watch learns it.
                if found is None or found.generation != generation or found.topic_id != topic_id:
                    found = read_classes[key] = first_read_class(key, generation, topic_id)
                read_as = found
            elif generation < 0:
                continue
            offset = record.offset()
            if record.headers() is None:
                value, record_key = record.value(), record.key()
                read: Any = new_message(read_as, (
                    topic, partition, offset, record.timestamp()[1], record_key, value,
                    (), 0, None, 1))
            else:
                read = build_payload(record, topic, partition, offset,
                                     read_as.topic_id, generation, watched, read_as)
                if not isinstance(read, FirstRead):  # a replayed dead letter
                    if run is not None:
                        run.last, run.size, run = last, size, None
                        n += len(run_reads)
                    parts.append((read.message, read))
                    n += 1
                    continue
                value, record_key = read.value, read.key
            if run is None or offset <= last:  # a new run keeps offsets rising
                if run is not None:
                    run.last, run.size = last, size
                    n += len(run_reads)
                run = PartitionRun(key, generation)
                parts.append(run)
                run_reads = run.reads
                append, size = run_reads.append, 0
            append(read)
            last = offset
            if value:
                size += len(value)
            if record_key:
                size += len(record_key)
        if run is not None:
            run.last, run.size = last, size
            n += len(run_reads)
        if n:
            total = 0  # the batch's bytes, for the loop backlog's byte bound
            for part in parts:
                if isinstance(part, PartitionRun):
                    total += part.size
                else:
                    total += len(part[0].value or b"") + len(part[0].key or b"")
            self.hand.inbox.post_batch(Records(ReadBatch(parts, n)), total)
            if not self.hand.status.ready:  # a batch read: the broker answers
                self.hand.status.set_ready()

    # -- backpressure: the policy decides, this applies --------------------------------

    def _hold_back(self, consumer: Any) -> bool:
        """True when this turn must not call ``consume()`` (core/backpressure.py): it waits
        for room instead, bounded by the consume timeout so commits keep running."""
        hand = self.hand
        hold, want = self.bp.decide(hand.outbox.group_paused, hand.inbox.backlog,
                                    time.monotonic())
        if (want is None) != (self.bp.assignment is None):
            self.set_paused(consumer, want)
        elif want is not self.bp.assignment:
            self.bp.applied(want)
            self.publish_paused()
        elif self.bp.held is not hand.status.pauses.held:
            self.publish_paused()
        if not hold:
            return False
        room = hand.room
        room.clear()
        # Asked again after clear(): room made in between is never missed.
        if self.bp.pressure(hand.outbox.group_paused, hand.inbox.backlog) is not None:
            room.wait(self.s.consume_timeout)
        return True

    def _apply_fetches(self, consumer: Any) -> None:
        """Pause the partitions whose ledgers reached their bound; seek back and resume
        the ones whose bound lifted.

        Pausing drops what librdkafka prefetched; what was consumed past the bound before
        the pause landed was discarded by the ledger, so resuming seeks back to its
        ``resume_at`` first (a plain resume would skip them). A seek refused now is tried
        again next turn: resuming without it would lose those records.
        """
        requests = self.hand.outbox.take_fetches()
        if not requests:
            return
        for key, request in requests.items():
            generation, seek_to, reason = request
            if self.owned.get(key) != generation:
                continue  # revoked, lost or restarted since the loop asked
            tp = TopicPartition(key[0], key[1])
            if seek_to is None:
                consumer.pause([tp])
                self.bp.bound(key, reason or PauseReason.PARTITION_BOUND)
                continue
            try:
                consumer.seek(TopicPartition(key[0], key[1], seek_to))
            except KafkaException as exc:
                self.log.warning("%s: %s[%d]: seek to %d before resuming failed (retrying): %s",
                                 self.s.consumer_group, key[0], key[1], seek_to, exc)
                self.hand.outbox.retry_fetch(key, request)
                continue
            self.bp.unbound(key)
            if self.bp.assignment is None:
                consumer.resume([tp])
            self.hand.inbox.post(PartitionRewound(key, generation))
        self.publish_paused()

    # -- topic identity ----------------------------------------------------------------

    def _recreated(self, consumer: Any, changed: Changes,
                   dlq_change: tuple[str, str] | None) -> None:
        """A recreated dead-letter topic gets a fresh producer and the records it may have
        lost; a recreated watched topic's partitions start again at their first offset,
        as a new generation (the loop forgets the old ones' messages, never committed)."""
        group = self.s.consumer_group
        if dlq_change is not None and self.sender is not None:
            self.hand.status.count(_topic_recreated)
            again = self.sender.reincarnate(
                self.s.dlq_producer_factory(producer_config(self.s.config)),
                self.s.revoke_timeout)
            self.log.warning("%s: dead-letter topic %s was deleted and recreated (topic id %s "
                             "-> %s): %d records acknowledged since the last check sent again",
                             group, self.sender.topic, *dlq_change, again)
        if not changed:
            return
        self.generation += 1
        restart = sorted(key for key in self.owned if key[0] in changed)
        for key in restart:
            self.owned[key] = self.generation
            self.commits.forget(key)
        for topic, (old, new) in sorted(changed.items()):
            self.hand.status.count(_topic_recreated)
            self.log.warning("%s: topic %s was deleted and recreated (topic id %s -> %s): "
                             "continuing from its first offset as a new stream", group,
                             topic, old, new)
        if not restart:
            return
        self.hand.inbox.post(PartitionsEnded(frozenset(restart)))
        self.hand.inbox.post(PartitionsStarted(self.generation,
                                    tuple((t, p, None, frozenset()) for t, p in restart)))
        for topic, partition in restart:
            consumer.seek(TopicPartition(topic, partition, OFFSET_BEGINNING))
        bounded = [TopicPartition(t, p) for t, p in restart if (t, p) in self.bp.bounded]
        for key in restart:
            self.bp.unbound(key)
        if bounded and self.bp.assignment is None:
            consumer.resume(bounded)
        self.publish_paused()

def consume_batch(consumer: Any, size: int, timeout: float) -> list[Any]:
    """What is fetched already, up to ``size``; else wait for the first record.

    ``consume(n, timeout)`` returns only when it has ``n`` records or the timeout passed,
    so at a low rate every record would wait for the timeout. Taking what is there
    without waiting, and otherwise waiting for one record and then taking what came with
    it, keeps full batches under load and hands a lone record over as soon as it arrives.
    """
    records: list[Any] = consumer.consume(num_messages=size, timeout=0)
    if records:
        return records
    records = consumer.consume(num_messages=1, timeout=timeout)
    if records and size > 1:
        records += consumer.consume(num_messages=size - 1, timeout=0)
    return records


def _topic_recreated(c: AdapterCounters, n: int) -> None:
    c.topics_recreated += n

"""Replaying dead letters: which record goes where (pure), and the resumable replay loop.

What a replay produces: the DLQ record's key, value and headers, with the replay
count bumped (``replay_headers``), onto the DLQ topic's replay topic
(``<dlq topic>.replay``, created when missing: ``kafka/replay_topic.py``), which only
the triggerer groups dead-lettering to that DLQ topic read. Other applications reading
the original topic never see a replay; ``--to ORIGINAL`` writes into each record's
original topic all the same, ``--to TOPIC`` anywhere. The original coordinates and
the rejecting watchers stay in the headers, so the triggerer hands the replayed
record only to those watchers and keys its events by the original coordinates: a
watcher that had accepted the message never sees it again, and an event already
persisted is never written twice. The record is produced with a new timestamp
(watchers see the original one through the headers), so retention on the target
topic does not delete it at once.

Loop guard: a record already replayed ``max_replays`` times (its replay count) is
copied, unchanged, to a parking topic instead of being replayed again.

Resumability and its failure window: the replay reads the DLQ with its own
consumer group (manual assignment, starting at the group's committed offsets) and
commits a batch's offsets only after every record produced for that batch has a
successful delivery report (idempotent producer, ``acks=all``). A crash or kill
between the produce and the commit re-sends that one batch on the next run
(duplicates only; replayed events are idempotent by original coordinates). The
commit metadata says whether the run that committed it finished, so the next run
reports an interruption. Every record the group read is committed past, filtered
out or not: the group's position means "examined". To replay the same records again (a
second fix, another selection), start from the beginning of the topic
(``from_start``: the group's position is ignored, then moved to where this run stops)
or name another group.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from sharedstream.kafka.connections import producer_config
from sharedstream.kafka.dlq_headers import replay_headers, replay_topic_name
from sharedstream.kafka.replay_topic import ReplayTopicError, ensure_replay_topic
from sharedstream.kafka.topics import BrokerUnreachableError
from sharedstream.ops.dlq.reader import DeadLetter, DeadLetterError, DeadLetterReader

REPLAY = "REPLAY"
ORIGINAL = "ORIGINAL"
DEFAULT_MAX_REPLAYS = 3
RUNNING = "sharedstream-dlq-replay:running"
FINISHED = "sharedstream-dlq-replay:finished"


def default_group(topic: str) -> str:
    return f"sharedstream-dlq-replay.{topic}"


def default_parking_topic(topic: str) -> str:
    return f"{topic}.parking"


class Action(Enum):
    REPLAY = "replayed"
    PARK = "parked"
    DUPLICATE = "skipped duplicates"
    FILTERED = "filtered out"
    FOREIGN = "foreign"


@dataclass(frozen=True, slots=True)
class ReplayRules:
    """What a replay selects and where it sends it.

    ``to``: ``REPLAY`` (the DLQ topic's replay topic), ``ORIGINAL`` (each record's
    original topic) or a topic name. Watcher and
    reason filters are OR within themselves and AND together; a reason filter is a
    substring of any rejection reason. ``since``/``until`` select by the DLQ record's
    timestamp (the original message's), ``until`` exclusive.
    """

    parking_topic: str
    to: str = REPLAY
    watchers: frozenset[str] = frozenset()
    reasons: tuple[str, ...] = ()
    since: datetime | None = None
    until: datetime | None = None
    max_replays: int = DEFAULT_MAX_REPLAYS

    def selects(self, record: DeadLetter) -> bool:
        ms = record.timestamp
        if self.since is not None and ms < self.since.timestamp() * 1000:
            return False
        if self.until is not None and ms >= self.until.timestamp() * 1000:
            return False
        if self.watchers and not self.watchers.intersection(record.rejections):
            return False
        return not self.reasons or any(
            r in reason for r in self.reasons for reason in record.rejections.values())


@dataclass(frozen=True, slots=True)
class Decision:
    """One record's fate; ``topic``/``headers`` set for what is produced."""

    record: DeadLetter
    action: Action
    topic: str | None = None
    headers: list[tuple[str, bytes | None]] | None = None


@dataclass(slots=True)
class ReplayPlanner:
    """Decides each record in read order; remembers identities to replay each once.

    Order of checks: selection (filters, time window), foreign without ``--to``,
    duplicate identity, loop guard, replay. A duplicate of a parked record is
    skipped as well: one message, one decision.
    """

    rules: ReplayRules
    seen: set[str] = field(default_factory=set)
    counts: Counter[Action] = field(default_factory=Counter)

    def decide(self, record: DeadLetter) -> Decision:
        decision = self._decide(record)
        self.counts[decision.action] += 1
        return decision

    def _decide(self, record: DeadLetter) -> Decision:
        rules = self.rules
        if not rules.selects(record):
            return Decision(record, Action.FILTERED)
        if record.origin is None:
            if rules.to in (REPLAY, ORIGINAL):
                return Decision(record, Action.FOREIGN)
            # Another tool's record: copied as it is, there is no context to update.
            return Decision(record, Action.REPLAY, rules.to, list(record.headers))
        if record.dedupe_key in self.seen:
            return Decision(record, Action.DUPLICATE)
        self.seen.add(record.dedupe_key)
        if record.replay_count >= rules.max_replays:
            return Decision(record, Action.PARK, rules.parking_topic, list(record.headers))
        target = (replay_topic_name(record.topic) if rules.to == REPLAY
                  else record.origin.topic if rules.to == ORIGINAL else rules.to)
        return Decision(record, Action.REPLAY, target, replay_headers(record.headers))


def commit_positions(records: Iterable[DeadLetter]) -> dict[int, int]:
    """``{partition: next offset}`` after ``records``: what a batch commits."""
    out: dict[int, int] = {}
    for r in records:
        out[r.partition] = max(out.get(r.partition, 0), r.offset + 1)
    return out


@dataclass(slots=True)
class ReplaySummary:
    topic: str
    group: str
    dry_run: bool
    from_start: bool = False
    examined: int = 0
    counts: Counter[Action] = field(default_factory=Counter)
    interrupted_before: bool = False
    batches: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "group": self.group, "dry_run": self.dry_run,
                "from_start": self.from_start, "examined": self.examined, "batches": self.batches,
                "resumed_after_interruption": self.interrupted_before,
                **{a.value.replace(" ", "_"): self.counts[a] for a in Action}}


Progress = Callable[[ReplaySummary, int], None]


class Replayer:
    """Runs one replay of a DLQ topic for one consumer group (see the module docstring).

    ``progress(summary, total)`` is called after every batch. Raises
    :class:`DeadLetterError` on a missing topic, an unreachable broker or a failed
    delivery (the batch is then not committed).
    """

    def __init__(self, connection: Mapping[str, Any], topic: str, rules: ReplayRules, *,
                 group: str, dry_run: bool = False, batch_size: int = 500,
                 max_rate: float | None = None, timeout: float = 10.0,
                 from_start: bool = False) -> None:
        self.topic = topic
        self.rules = rules
        self.group = group
        self.from_start = from_start
        self.dry_run = dry_run
        self.batch_size = batch_size
        self.max_rate = max_rate
        self.timeout = timeout
        self._connection = dict(connection)
        self._errors: list[KafkaError] = []
        self._existing: set[str] = set()
        self._producer: Any = None

    def run(self, progress: Progress | None = None) -> ReplaySummary:
        summary = ReplaySummary(self.topic, self.group, self.dry_run, self.from_start)
        cursor = Consumer(self._connection | {
            "group.id": self.group, "enable.auto.commit": False, "log_level": 0,
            "error_cb": self._errors.append})
        try:
            committed = self._committed(cursor)
            summary.interrupted_before = any(meta == RUNNING for _, meta in committed.values())
            starts = {} if self.from_start else {p: o for p, (o, _) in committed.items()}
            with DeadLetterReader(self._connection, self.topic, since=self.rules.since,
                                  start_offsets=starts, timeout=self.timeout) as reader:
                # An attribute, never a local or an argument: a failure's traceback keeps
                # the frames, and what they hold could then be freed only by the garbage
                # collector, maybe on a librdkafka thread, which aborts the process.
                self._producer = None if self.dry_run else Producer(
                    producer_config(self._connection)
                    | {"log_level": 0, "error_cb": self._errors.append})
                try:
                    self._loop(reader, cursor, summary, progress)
                finally:
                    self._producer = None  # destroyed here, on this thread
        finally:
            cursor.close()
        return summary

    def _loop(self, reader: DeadLetterReader, cursor: Any,
              summary: ReplaySummary, progress: Progress | None) -> None:
        planner = ReplayPlanner(self.rules)
        summary.counts = planner.counts
        started = time.monotonic()
        touched: dict[int, int] = {}
        for batch in reader.batches(self.batch_size):
            decisions = [planner.decide(r) for r in batch]
            summary.examined += len(batch)
            summary.batches += 1
            for d in decisions:
                if d.topic is not None:
                    self._check_topic(cursor, d.topic)
            if self._producer is not None:
                self._produce(decisions)
                positions = commit_positions(batch)
                self._commit(cursor, positions, RUNNING)
                touched.update(positions)
            if progress is not None:
                progress(summary, reader.total)
            if self.max_rate:
                # A deliberate throttle so a large replay does not swamp the triggerer.
                behind = summary.examined / self.max_rate - (time.monotonic() - started)
                if behind > 0:
                    time.sleep(behind)
        if touched:
            self._commit(cursor, touched, FINISHED)

    def _committed(self, cursor: Any) -> dict[int, tuple[int, str]]:
        partitions = self._call(cursor.list_topics, self.topic, timeout=self.timeout)
        found = partitions.topics.get(self.topic)
        if found is None or found.error is not None:
            raise DeadLetterError(f"topic {self.topic!r} not found")
        tps = [TopicPartition(self.topic, p) for p in sorted(found.partitions)]
        result = self._call(cursor.committed, tps, timeout=self.timeout)
        return {tp.partition: (tp.offset, tp.metadata or "") for tp in result if tp.offset >= 0}

    def _check_topic(self, cursor: Any, topic: str) -> None:
        """A target that does not exist fails the run before anything is produced to it
        (a producer would wait ``message.timeout.ms`` and then fail anyway, or
        auto-create it with broker defaults). The replay topic is created instead (a dry
        run only reports it)."""
        if topic in self._existing:
            return
        if self.rules.to == REPLAY and topic == replay_topic_name(self.topic):
            if not self.dry_run:
                try:
                    ensure_replay_topic(self._connection, self.topic, self.timeout)
                except (ReplayTopicError, BrokerUnreachableError) as exc:
                    raise DeadLetterError(str(exc)) from None
            self._existing.add(topic)
            return
        metadata = self._call(cursor.list_topics, topic, timeout=self.timeout)
        found = metadata.topics.get(topic)
        if found is None or found.error is not None:
            hint = " (create it or pass --parking-topic)" if topic == self.rules.parking_topic \
                else ""
            raise DeadLetterError(f"target topic {topic!r} not found{hint}")
        self._existing.add(topic)

    def _produce(self, decisions: Sequence[Decision]) -> None:
        failures: list[str] = []

        def report(err: KafkaError | None, _msg: Any) -> None:
            if err is not None:
                failures.append(err.str())

        sent = 0
        for d in decisions:
            if d.topic is None:
                continue
            sent += 1
            while True:
                try:
                    self._producer.produce(d.topic, d.record.value, d.record.key,
                                           headers=d.headers, on_delivery=report)
                    break
                except BufferError:
                    self._producer.poll(0.1)  # local queue full: let reports drain, then retry
                except KafkaException as exc:
                    raise DeadLetterError(f"kafka: {exc.args[0].str()}") from None
        if not sent:
            return
        remaining = self._producer.flush(self.timeout + 30)
        if remaining or failures:
            detail = failures[0] if failures else f"{remaining} delivery report(s) missing"
            raise DeadLetterError(
                f"kafka: {len(failures) + remaining} of {sent} record(s) not delivered "
                f"({detail}); this batch is not committed, run the replay again")

    def _commit(self, cursor: Any, positions: Mapping[int, int], metadata: str) -> None:
        offsets = [TopicPartition(self.topic, p, o, metadata) for p, o in positions.items()]
        result = self._call(cursor.commit, offsets=offsets, asynchronous=False)
        failed = [tp for tp in result or [] if tp.error is not None]
        if failed:
            raise DeadLetterError(f"kafka: commit refused: {failed[0].error.str()}")

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            text = error.str() if isinstance(error, KafkaError) else str(exc)
            if self._errors:
                text += f" (last error: {self._errors[-1].str()})"
            raise DeadLetterError(f"kafka: {text}") from None

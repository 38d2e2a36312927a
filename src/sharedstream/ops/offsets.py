"""What an operator sees and changes of a shared-stream consumer group's offsets.

A group's position per partition is its committed offset plus the remembered
progress above it (terminal offsets carried in the commit metadata, see
``progress.py``). ``show`` reads both next to the log end; ``reset`` moves the
committed offsets deliberately (earliest, latest, or the first offset at or after
a time) and clears the remembered progress, which belongs to the old position.

Resetting while members are live would race their commits (and the broker
refuses it), so :func:`plan_reset` refuses first, naming the member count.

Reprocessing creates no duplicates: events are idempotent per (watcher, topic
id, partition, offset, index), so re-read offsets produce events only where the
old ones were deleted (``sharedstream events clean``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, TypeVar

from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import OffsetSpec as _OffsetSpec  # type: ignore[attr-defined]

from sharedstream.kafka.connections import DEFAULT_GROUP_ID, client_config
from sharedstream.kafka.group_start import (
    GroupAdmin,
    delete_command,
    group_topics,
    kafka_reason,
    left_behind,
)
from sharedstream.kafka.progress import decode_progress
from sharedstream.ops.clitools import CommandError
from sharedstream.statestore.durations import NotAnInstant, parse_instant, shown

Partition = tuple[str, int]
T = TypeVar("T")
ResetTarget = Literal["earliest", "latest"] | datetime


@dataclass(frozen=True, slots=True)
class PartitionPosition:
    """One partition of a group: where it is committed and how far the log goes.

    ``committed`` is None when the group never committed this partition; it then
    starts from ``auto.offset.reset`` (earliest for sharedstream), so ``lag`` counts
    from ``log_start``. ``remembered`` are handled offsets above ``committed``.
    """

    topic: str
    partition: int
    committed: int | None
    remembered: tuple[int, ...]
    log_start: int
    log_end: int

    @property
    def lag(self) -> int:
        start = self.log_start if self.committed is None else self.committed
        return max(self.log_end - start, 0)


@dataclass(frozen=True, slots=True)
class GroupPositions:
    group: str
    state: str
    live_members: int
    partitions: list[PartitionPosition] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class LeftBehind:
    """A group no current group uses, and the command that removes it."""

    group: str
    live_members: int
    command: str


@dataclass(frozen=True, slots=True)
class ResetChange:
    """One partition's committed offset before and after a reset."""

    topic: str
    partition: int
    before: int | None
    remembered_before: int
    after: int


def parse_reset_target(text: str, now: datetime) -> ResetTarget:
    """``earliest``, ``latest``, or an instant (ISO-8601, or a duration ago like ``2h``)."""
    lowered = text.strip().lower()
    if lowered == "earliest":
        return "earliest"
    if lowered == "latest":
        return "latest"
    try:
        return parse_instant(text, now)
    except NotAnInstant:
        raise ValueError("not earliest, latest, an ISO-8601 time or a duration: "
                         f"{shown(text)}") from None


def format_ranges(offsets: Iterable[int]) -> str:
    """``[3, 4, 5, 8]`` -> ``"3-5,8"``: remembered progress is mostly long runs."""
    parts: list[str] = []
    run: list[int] = []
    for offset in sorted(set(offsets)):
        if run and offset == run[-1] + 1:
            run.append(offset)
            continue
        if run:
            parts.append(_run_text(run))
        run = [offset]
    if run:
        parts.append(_run_text(run))
    return ",".join(parts)


def _run_text(run: Sequence[int]) -> str:
    return str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}"


class GroupOffsets:
    """Admin-client operations on one consumer group, every call bounded by ``timeout``.

    Every Kafka failure becomes a :class:`CommandError` with a one-line reason (the
    connection config, which may hold secrets, is never part of it).

    Use it as a context manager (or keep it for the process's life, as the console
    does): leaving it releases the admin client on this thread. A failed call leaves its
    frames, and so this object, in the failure's traceback; once that traceback is
    cyclic garbage, the client would be freed by whichever thread next triggers a
    collection, and a librdkafka thread finishing a timed-out request is one: librdkafka
    aborts the process when it is destroyed from its own thread.
    """

    def __init__(self, connection: Mapping[str, Any], group: str, timeout: float) -> None:
        self.group = group
        self.timeout = timeout
        self._group_id = str(connection.get("group.id") or DEFAULT_GROUP_ID)
        config = client_config(connection)
        # librdkafka would log every failed connection attempt to stderr; the command
        # reports one line instead.
        config["log_level"] = 0
        config["error_cb"] = _ignore
        self._admin = AdminClient(config)
        self._groups = GroupAdmin(self._admin, timeout)

    def __enter__(self) -> GroupOffsets:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the admin client (once; no call may follow)."""
        self._groups.admin = None  # a failure's frames may still hold the GroupAdmin
        del self._admin, self._groups

    def _result(self, future: Any) -> Any:
        try:
            return future.result(timeout=self.timeout)
        except KafkaException as exc:
            raise CommandError(f"kafka: {kafka_reason(exc)}") from None
        except TimeoutError:
            raise CommandError(f"kafka: no answer within {self.timeout:g}s") from None

    def state(self) -> tuple[str, int]:
        """The group's state name and its number of live members."""
        return self._call(self._groups.state, self.group)

    def committed(self) -> dict[Partition, tuple[int, str]]:
        """Committed offset and metadata per partition the group ever committed."""
        return self._call(self._groups.committed, self.group)

    def left_behind(self, latest: Iterable[str]) -> list[LeftBehind]:
        """Groups of this connection's ``<group.id>.`` prefix, other than this one, with
        committed offsets, left behind by a topic-set change (their lag grows for ever):
        ``latest`` are the groups the database records as each watcher's last, see
        :func:`~sharedstream.kafka.group_start.left_behind`."""
        used = {self.group, *latest}
        prefixed = {name: self._call(self._groups.committed, name)
                    for name in self._call(self._groups.groups, f"{self._group_id}.")
                    if name not in used}
        return [LeftBehind(name, self._call(self._groups.state, name)[1],
                           delete_command(name))
                for name in left_behind(prefixed, latest, [self.group])]

    def delete(self) -> None:
        """Delete the group and its committed offsets (refused by the broker while it has
        members)."""
        self._call(self._groups.delete, self.group)

    def _call(self, fn: Callable[..., T], *args: Any) -> T:
        try:
            return fn(*args)
        except KafkaException as exc:
            raise CommandError(f"kafka: {kafka_reason(exc)}") from None
        except TimeoutError:
            raise CommandError(f"kafka: no answer within {self.timeout:g}s") from None

    def partitions(self, topics: Iterable[str]) -> list[Partition]:
        """Every partition of ``topics``; a topic that does not exist is an error."""
        wanted = sorted(set(topics))
        try:
            metadata = self._admin.list_topics(timeout=self.timeout)
        except KafkaException as exc:
            raise CommandError(f"kafka: {kafka_reason(exc)}") from None
        missing = [t for t in wanted if t not in metadata.topics
                   or metadata.topics[t].error is not None]
        if missing:
            raise CommandError(f"topic(s) not found: {', '.join(missing)}")
        return [(t, p) for t in wanted for p in sorted(metadata.topics[t].partitions)]

    def log_offsets(self, partitions: Sequence[Partition], where: ResetTarget) -> list[int]:
        """The log start, the log end, or the first offset at or after a time, in each
        partition (a time after the last message gives -1: there is no such offset yet)."""
        if not partitions:
            return []
        spec = _offset_spec(where)
        futures = self._admin.list_offsets(
            {TopicPartition(t, p): spec for t, p in partitions}, request_timeout=self.timeout)
        by_partition = {(tp.topic, tp.partition): future for tp, future in futures.items()}
        return [int(self._result(by_partition[tp]).offset) for tp in partitions]

    def alter(self, offsets: Mapping[Partition, int]) -> None:
        """Commit ``offsets`` for the group with empty metadata (no remembered progress)."""
        request = [ConsumerGroupTopicPartitions(self.group, [
            TopicPartition(t, p, offset, "") for (t, p), offset in offsets.items()])]
        result = self._result(self._admin.alter_consumer_group_offsets(
            request, request_timeout=self.timeout)[self.group])
        failed = [f"{tp.topic}[{tp.partition}]: {tp.error.str()}"
                  for tp in result.topic_partitions if tp.error is not None]
        if failed:
            raise CommandError("kafka refused the new offsets: " + "; ".join(failed))

    def topics(self, committed: Mapping[Partition, tuple[int, str]]) -> list[str]:
        """The group's topics: those it committed plus those its name declares."""
        return sorted({t for t, _ in committed} | set(group_topics(self.group, self._group_id)))


def show(offsets: GroupOffsets) -> GroupPositions:
    """Committed offset, remembered progress, log start/end and lag per partition."""
    state, members = offsets.state()
    committed = offsets.committed()
    if state == ConsumerGroupState.DEAD.name and not committed:
        raise CommandError(f"consumer group {offsets.group!r} not found "
                           "(no members, no committed offsets)")
    partitions = offsets.partitions(offsets.topics(committed))
    starts = offsets.log_offsets(partitions, "earliest")
    ends = offsets.log_offsets(partitions, "latest")
    rows = []
    for (topic, partition), start, end in zip(partitions, starts, ends, strict=True):
        at, metadata = committed.get((topic, partition), (None, ""))
        remembered = tuple(sorted(decode_progress(at, metadata))) if at is not None else ()
        rows.append(PartitionPosition(topic, partition, at, remembered, start, end))
    return GroupPositions(offsets.group, state, members, rows)


def idle_committed(offsets: GroupOffsets, action: str) -> dict[Partition, tuple[int, str]]:
    """The group's committed offsets, for an ``action`` that changes them: refused while
    the group has live members (they would race it) or when the group does not exist."""
    state, members = offsets.state()
    if members:
        raise CommandError(
            f"consumer group {offsets.group!r} has {members} live member(s) (state {state}): "
            f"stop every triggerer of this group first, then {action}")
    committed = offsets.committed()
    if state == ConsumerGroupState.DEAD.name and not committed:
        raise CommandError(f"consumer group {offsets.group!r} not found "
                           "(no members, no committed offsets)")
    return committed


def plan_reset(offsets: GroupOffsets, target: ResetTarget, topic: str | None = None,
               partition: int | None = None) -> list[ResetChange]:
    """The changes a reset to ``target`` makes; refuses while the group has live members."""
    committed = idle_committed(offsets, "reset")
    topics = offsets.topics(committed)
    if topic is not None:
        if topic not in topics:
            raise CommandError(f"topic {topic!r} is not one of group {offsets.group!r}'s "
                               f"topics ({', '.join(topics)})")
        topics = [topic]
    partitions = offsets.partitions(topics)
    if partition is not None:
        partitions = [tp for tp in partitions if tp[1] == partition]
        if not partitions:
            raise CommandError(f"topic {topic!r} has no partition {partition}")
    ends = offsets.log_offsets(partitions, "latest")
    found = ends if target == "latest" else offsets.log_offsets(partitions, target)
    # No message at or after the time yet: start where the next one will be written.
    targets = [end if offset < 0 else offset for offset, end in zip(found, ends, strict=True)]
    changes = []
    for (t, p), after in zip(partitions, targets, strict=True):
        before, metadata = committed.get((t, p), (None, ""))
        remembered = len(decode_progress(before, metadata)) if before is not None else 0
        changes.append(ResetChange(t, p, before, remembered, after))
    return changes


def apply_reset(offsets: GroupOffsets, changes: Sequence[ResetChange]) -> None:
    offsets.alter({(c.topic, c.partition): c.after for c in changes})


def _offset_spec(where: ResetTarget) -> Any:
    # OffsetSpec is untyped in confluent-kafka's stubs; keep its calls in this one place.
    spec: Any = _OffsetSpec
    if where == "earliest":
        return spec.earliest()
    if where == "latest":
        return spec.latest()
    return spec.for_timestamp(int(where.timestamp() * 1000))


def _ignore(_error: KafkaError) -> None:
    """Connection errors surface as the failed request's one-line error instead."""

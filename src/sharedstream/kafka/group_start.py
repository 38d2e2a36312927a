"""Where a shared-stream consumer group starts reading each topic, and groups left behind.

The consumer group of a shared-stream group is ``<group.id>.<topics joined by "+">``
(:func:`~sharedstream.kafka.connections.consumer_group_id`), so a watcher module whose
topic set changes consumes as a new group, with nothing committed. Left alone it would
start every topic at ``auto.offset.reset`` (``earliest``): a silent re-read of the whole
retention of topics its watchers had read. So, before the group's consumer exists,
each partition starts from where these watchers read it *last*: per watcher, of the
groups the database recorded it in (same ``<group.id>.`` prefix), the one recorded most
recently that committed the partition; the group's own commit counts only as one of
them. A group returning to an earlier topic set ([A] -> [A,B] -> [B] -> [A,B]) thus
continues B from the [B] group, not from its own commit left stale when it stopped.
Per partition (:func:`plan_start`):

* the group is where one of them read it last: its own offset (``committed``); a
  watcher moved into a group that others read takes the group's position, as a
  watcher added to a group always did;
* another group is, or several at the same offset (a tie: one start records all its
  groups at one instant): its offset and progress metadata (guarantee 7; with several,
  only the offsets every one of them remembers) are copied, replacing any stale
  commit of this group (``copied``);
* else, the groups where they read it last disagree (two watchers from different
  groups, or a tie): the start is refused (``conflict``). The highest offset would skip, for
  a watcher of a group that was behind, what it never handled (guarantee 1); the
  lowest would re-read up to the retention of a stale group. Only the operator knows
  which group is current: deleting the other one (``sharedstream offsets delete``)
  settles it;
* nobody committed it: ``auto.offset.reset`` (``reset``).

The copy (:meth:`GroupAdmin.commit`) is one offset commit by the admin client, made only
while the group has no live member, before this process subscribes and before it
records its watcher sets. Failure windows: a crash before the copy leaves nothing
written (the next start plans again). A crash after it, before the recording, leaves
the copied offsets; the next start still finds the source read last and copies again
(the same offsets, or further if the source went on): recording first would have made
this group the last read, and its stale commit would win. A copy the broker took only
in part is finished by the next start, because each partition is decided on its own.
A source group still running while the copy is made (an old triggerer not stopped
yet) goes on committing: what it handles after the copy is handed to this group's
watchers again (events are idempotent), never skipped. Two processes of the new group
starting at once: the second one's copy is refused once the first has joined, and it
exits (a supervisor restarts it, and it then continues from the group's own offsets).

A group *left behind* is a group of the prefix with committed offsets that is no
recorded watcher's latest group (of any module), no current group and no group copied
from: its lag grows for ever. :func:`left_behind` decides it for ``check``, ``run``
and ``offsets show`` alike.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, TypeVar

from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)

from sharedstream.core.backoff import Backoff
from sharedstream.kafka.progress import decode_progress, encode_progress

Partition = tuple[str, int]
Committed = dict[Partition, tuple[int, str]]
Reason = Literal["committed", "copied", "reset", "conflict"]

# States in which nobody is consuming; any other state (rebalancing, stable, a state this
# client does not know) may have members about to commit.
IDLE_STATES = frozenset({ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD})
# A coordinator still loading its groups (a broker just started) or moved: ask again.
COORDINATOR_ERRORS = frozenset({KafkaError.NOT_COORDINATOR,
                                KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                                KafkaError.COORDINATOR_NOT_AVAILABLE})
RETRY_INITIAL_S = 0.1
RETRY_CAP_S = 2.0
T = TypeVar("T")


def group_topics(group: str, group_id: str) -> list[str]:
    """The topics a shared-stream consumer group name declares (``<group.id>.<t1+t2>``),
    or none when the name was not made from ``group_id``."""
    prefix = f"{group_id}."
    if not group.startswith(prefix) or len(group) == len(prefix):
        return []
    return group[len(prefix):].split("+")


def delete_command(group: str) -> str:
    return f"sharedstream offsets delete --group {group}"


@dataclass(frozen=True, slots=True)
class PartitionStart:
    """Where one partition starts: ``offset``/``metadata`` are what is copied (``copied``)
    or already committed (``committed``); ``sources`` the groups it comes from or, for a
    conflict, every group with its offset."""

    topic: str
    partition: int
    reason: Reason
    offset: int | None = None
    metadata: str = ""
    sources: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class GroupStart:
    group: str
    reset: str  # the connection's auto.offset.reset
    live_members: int
    partitions: tuple[PartitionStart, ...]

    def copies(self) -> dict[Partition, tuple[int, str]]:
        """What :meth:`GroupAdmin.commit` writes: nothing while the group has live members
        (they started it already; the broker would refuse the commit anyway)."""
        if self.live_members:
            return {}
        return {(p.topic, p.partition): (p.offset, p.metadata) for p in self.partitions
                if p.reason == "copied" and p.offset is not None}

    def conflict(self) -> str | None:
        """The refusal, naming each disputed partition's groups and offsets, or None."""
        disputed = [p for p in self.partitions if p.reason == "conflict"]
        if not disputed:
            return None
        where = "; ".join(
            f"{p.topic}[{p.partition}]: " + ", ".join(f"{g} at {o}" for g, o in p.sources)
            for p in disputed)
        groups = sorted({g for p in disputed for g, _ in p.sources})
        return (f"group {self.group} has no committed offsets for partitions that several "
                f"groups committed at different offsets ({where}): continuing from either "
                "could skip or re-read messages, so delete the group that is out of date "
                f"(e.g. `{delete_command(groups[0])}`) and start again")

    def lines(self) -> list[str]:
        """Per topic, where it starts and why (partitions named when they differ)."""
        out = []
        for topic in sorted({p.topic for p in self.partitions}):
            rows = [p for p in self.partitions if p.topic == topic]
            texts = [(self._why(p), p.partition) for p in rows]
            kinds = sorted({text for text, _ in texts})
            if len(kinds) == 1:
                out.append(f"{topic}: {kinds[0]}")
                continue
            for kind in kinds:
                numbers = ",".join(str(n) for text, n in texts if text == kind)
                out.append(f"{topic} partition(s) {numbers}: {kind}")
        return out

    def _why(self, p: PartitionStart) -> str:
        if p.reason == "committed":
            return "committed offsets of this group"
        if p.reason == "conflict":
            return "groups disagree: " + ", ".join(f"{g} at {o}" for g, o in p.sources)
        if p.reason == "copied":
            groups = " and ".join(g for g, _ in p.sources)
            text = (f"continues from group {groups}, where these watchers read it last "
                    "(topic set changed)")
            if self.live_members:
                text += (f"; not copied: the group has {self.live_members} live member(s), "
                         "which started it already")
            return text
        return f"no committed offset, starts at {self.reset} (auto.offset.reset)"


def plan_start(group: str, partitions: Iterable[Partition], own: Committed,
               sources: Mapping[str, Committed], *, reset: str, live_members: int = 0,
               reads: Mapping[str, Mapping[str, datetime]] | None = None) -> GroupStart:
    """Decide each partition's start (see the module doc); no I/O. ``reads`` maps each
    watcher of the group to the groups it was recorded in, with when (without it, the
    group's own commit comes first and every source counts alike)."""
    committed_by = {**sources, group: own}
    rows = []
    for topic, partition in partitions:
        key = (topic, partition)
        chosen = _read_last(key, committed_by, reads or {})
        if not chosen:
            chosen = {group} if key in own else {name for name, c in sources.items()
                                                  if key in c}
        found = sorted((name, committed_by[name][key]) for name in chosen)
        offsets = {offset for _, (offset, _) in found}
        named = tuple((name, offset) for name, (offset, _) in found)
        if group in chosen:
            offset, metadata = own[key]
            rows.append(PartitionStart(topic, partition, "committed", offset, metadata))
        elif not found:
            rows.append(PartitionStart(topic, partition, "reset"))
        elif len(offsets) > 1:
            rows.append(PartitionStart(topic, partition, "conflict", sources=named))
        else:
            [offset] = offsets
            remembered = frozenset.intersection(*(decode_progress(offset, metadata)
                                                  for _, (_, metadata) in found))
            metadata = found[0][1][1] if len(found) == 1 else encode_progress(offset,
                                                                               remembered)
            rows.append(PartitionStart(topic, partition, "copied", offset, metadata, named))
    return GroupStart(group, reset, live_members, tuple(rows))


def _read_last(key: Partition, committed_by: Mapping[str, Committed],
               reads: Mapping[str, Mapping[str, datetime]]) -> set[str]:
    """Per watcher, its most recently recorded group that committed ``key`` (all of them
    on a tie: one start records its groups at one instant); their union."""
    out: set[str] = set()
    for groups in reads.values():
        having = {name: at for name, at in groups.items() if key in committed_by.get(name, {})}
        if having:
            newest = max(having.values())
            out |= {name for name, at in having.items() if at == newest}
    return out


def left_behind(prefixed: Mapping[str, Committed], latest: Iterable[str],
                current: Iterable[str] = ()) -> list[str]:
    """The groups of ``prefixed`` (name -> committed offsets) with committed offsets that
    are in use by nobody, sorted. In use: ``latest``, the group each watcher recorded in
    the database was recorded in last, whichever module it belongs to
    (:func:`~sharedstream.triggerer.registration.groups_in_use`), and ``current``, the
    groups a command starts or shows and those they continue from. ``check``, ``run``
    and ``offsets show`` all decide here, so they agree."""
    used = {*latest, *current}
    return sorted(name for name, committed in prefixed.items()
                  if committed and name not in used)


def kafka_reason(exc: BaseException) -> str:
    """A Kafka failure in one line: the error's name (its code) and text. The text can be
    empty (a request cut short, seen once from ``offsets delete``), and then, like a
    retriable error, the line says that trying again may help."""
    error = exc.args[0] if exc.args else None
    if not isinstance(error, KafkaError):
        return str(exc) or type(exc).__name__
    text = error.str()
    if not text or text == error.name():
        return f"{error.name()}, no reason given (trying again may help)"
    if error.retriable():
        return f"{error.name()}: {text} (retriable: trying again may help)"
    return f"{error.name()}: {text}"


class GroupAdmin:
    """The admin requests behind the start plan, on one connection's admin client.

    Kafka failures raise :class:`confluent_kafka.KafkaException` (``TimeoutError`` when
    no answer comes within ``timeout``); callers word them for their users. A request the
    broker answers with a retriable error (its group coordinator is still loading after
    a start, or moved: ``NOT_COORDINATOR``, ``COORDINATOR_LOAD_IN_PROGRESS``) is sent
    again with backoff until ``timeout`` has passed: a whole-cluster restart, where the
    broker and the triggerer come back together, is not a configuration error.
    """

    def __init__(self, admin: Any, timeout: float,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.admin = admin
        self.timeout = timeout
        self._clock = clock
        self._sleep = sleep

    def _retrying(self, request: Callable[[], T]) -> T:
        deadline = self._clock() + self.timeout
        backoff = Backoff(RETRY_INITIAL_S, RETRY_CAP_S)
        while True:
            try:
                return request()
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                retriable = isinstance(error, KafkaError) and (
                    error.retriable() or error.code() in COORDINATOR_ERRORS)
                delay = backoff.next()
                if not retriable or self._clock() + delay > deadline:
                    raise
                self._sleep(delay)

    def groups(self, prefix: str) -> list[str]:
        """Every consumer group whose name starts with ``prefix``."""
        result = self._retrying(lambda: self.admin.list_consumer_groups(
            request_timeout=self.timeout).result(timeout=self.timeout))
        return sorted(g.group_id for g in result.valid if g.group_id.startswith(prefix))

    def committed(self, group: str) -> Committed:
        """Committed offset and metadata per partition the group ever committed."""
        request = [ConsumerGroupTopicPartitions(group)]
        result = self._retrying(lambda: self.admin.list_consumer_group_offsets(
            request, request_timeout=self.timeout)[group].result(timeout=self.timeout))
        return {(tp.topic, tp.partition): (tp.offset, tp.metadata or "")
                for tp in result.topic_partitions if tp.offset >= 0}

    def state(self, group: str) -> tuple[str, int]:
        """The group's state name and its number of live members (at least 1 in any state
        but empty or dead: members may be about to commit)."""
        try:
            description = self._retrying(lambda: self.admin.describe_consumer_groups(
                [group], request_timeout=self.timeout)[group].result(timeout=self.timeout))
        except Exception as exc:
            error = exc.args[0] if exc.args else None
            if isinstance(error, KafkaError) and error.code() == KafkaError.GROUP_ID_NOT_FOUND:
                return ConsumerGroupState.DEAD.name, 0
            raise
        members = len(description.members)
        if description.state not in IDLE_STATES:
            members = max(members, 1)
        return description.state.name, members

    def commit(self, group: str, offsets: Mapping[Partition, tuple[int, str]]) -> list[str]:
        """Commit ``offsets`` (with metadata) for ``group``; the partitions refused, as
        ``topic[partition]: reason``."""
        request = [ConsumerGroupTopicPartitions(group, [
            TopicPartition(t, p, offset, metadata)
            for (t, p), (offset, metadata) in offsets.items()])]
        result = self._retrying(lambda: self.admin.alter_consumer_group_offsets(
            request, request_timeout=self.timeout)[group].result(timeout=self.timeout))
        return [f"{tp.topic}[{tp.partition}]: {tp.error.str()}"
                for tp in result.topic_partitions if tp.error is not None]

    def delete(self, group: str) -> None:
        """Delete the group and its committed offsets (the broker refuses a live group)."""
        self.admin.delete_consumer_groups([group], request_timeout=self.timeout)[group].result(
            timeout=self.timeout)

    def partitions(self, topics: Iterable[str]) -> list[Partition]:
        """Every partition of the ``topics`` that exist."""
        metadata = self.admin.list_topics(timeout=self.timeout)
        found = [t for t in sorted(set(topics)) if t in metadata.topics
                 and metadata.topics[t].error is None]
        return [(t, p) for t in found for p in sorted(metadata.topics[t].partitions)]


def source_groups(admin: GroupAdmin, group_id: str, group: str, topics: Sequence[str],
                  related: Iterable[str]) -> dict[str, Committed]:
    """Committed offsets of the groups ``group`` may continue from: ``related`` groups
    (those recorded with one of its watchers) of the prefix, other than itself, whose
    names declare one of ``topics``, restricted to those topics."""
    wanted = set(topics)
    out = {}
    for name in sorted(set(related) - {group}):
        if not wanted & set(group_topics(name, group_id)):
            continue
        committed = {key: value for key, value in admin.committed(name).items()
                     if key[0] in wanted}
        if committed:
            out[name] = committed
    return out

"""The partition ledger: what is known of every offset a consumer group reads.

One :class:`PartitionLedger` per assigned partition and assignment generation, all
of them in one :class:`Ledger` per group, owned by the group on the event loop. A
partition keeps what it read as :class:`Slice` runs, one per run of its records in one
consumed batch. A slice starts *counted*: the records, and how many watchers still owe
all of them; a batch watcher's clean acknowledgement of the whole slice is one
decrement and the last one settles it in O(1). It is *itemised* (one :class:`Entry`
per offset, holding everything known of it: the record, which watchers still owe an
outcome, holds and attempts, dead-letter state) as soon as something needs a
per-message record: a failure or rejection, events or staged state, a per-message
watcher, a targeted message, a missing watcher, an acknowledgement out of order. The
terminal prefix is dropped a settled slice at a time, not an offset at a time. The
consumer thread never touches the ledger: it hands records over, and applies the
pauses, seeks and commit targets the ledger publishes.

Invariants (``docs/architecture.md`` states them for users):

1. Every offset admitted is in its partition's ledger until it is terminal and the
   commit target passed it; nothing read is dropped without a log line.
2. The commit target is the first offset that is not terminal (or one past the last
   terminal offset), so nothing unresolved is ever committed past. Terminal offsets
   above it travel in the commit metadata (guarantee 7).
3. A held offset is the floor until it turns terminal; it is handed out again only
   while held (one redelivery per hold), and only to the watchers that still owe it.
   Each watcher resolves a delivery round at most once.
4. A rejected offset is terminal only once its dead letter is durable.
5. ``admitted - floor <= max_in_flight`` and unresolved payload bytes
   ``<= max_in_flight_bytes`` per partition, up to one record: at the bound the
   partition stops admitting and asks to be paused, and what was read past it is read
   again after a seek.
6. An outcome of an earlier generation (the partition was revoked, lost or its
   topic recreated since) changes nothing.
7. Publishing costs what changed since the last publish.
8. A counted slice is wholly pending or wholly terminal; its ``pending`` counts the
   watchers that have not resolved all of it, and ``progress`` the prefix each of them
   resolved, so itemising it gives every entry exactly the watchers still owing it.

States of an offset:

* ``PENDING``: handed to the watchers, outcome unknown.
* ``HELD``: some watcher failed it; redelivered after its retry time.
* ``DELIVERING``: resolved, rejected by someone; terminal once its dead letter is
  acknowledged (or recorded in ``rejected_message``).
* ``TERMINAL``: acked by all, or rejected and delivered.
* ``DROPPED``: its partition ledger ended (revoked, lost, topic recreated, group
  stopped); late outcomes are ignored.

Offsets are not assumed contiguous (compaction and transaction markers leave gaps):
entries are kept in read order and the target follows them. Within a generation a
partition is read in offset order, so an offset below ``next`` (one past the last
read) and at or above ``base`` is a copy of one already read (a re-fetch).

Failure window: the ledger lives in memory. If the process dies, what it knew beyond
the last commit (holds, attempts, terminal offsets of the last commit interval) is
lost; the broker hands those offsets out again from the committed position.
"""

from __future__ import annotations

import enum
import logging
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

log = logging.getLogger(__name__)

Key = tuple[str, int]
# What the consumer thread is told per partition: (generation, offset to commit,
# terminal offsets above it).
Target = tuple[int, int, tuple[int, ...]]


class LedgerRecord(Protocol):
    """What the ledger needs of a record: where it was read, and in which generation."""

    @property
    def partition_key(self) -> Key: ...

    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...

    @property
    def offset(self) -> int: ...

    @property
    def generation(self) -> int: ...

    @property
    def targets(self) -> frozenset[str] | None:
        """The watchers it is addressed to (a replayed dead letter), or None for all."""


class Fetch(enum.Enum):
    """Whether a partition's ledger takes what the consumer reads.

    * ``OPEN``: every record read is admitted.
    * ``BOUNDED``: the ledger reached its bound; its partition is (being) paused and
      records read past ``resume_at`` are discarded (they are read again later).
    * ``REWINDING``: the bound lifted; the consumer is asked to seek back to
      ``resume_at`` and resume. Records still queued from before the seek are
      discarded until the consumer says the seek happened.
    """

    OPEN = "open"
    BOUNDED = "bounded"
    REWINDING = "rewinding"


class State(enum.Enum):
    PENDING = "pending"
    HELD = "held"
    DELIVERING = "delivering"
    TERMINAL = "terminal"
    DROPPED = "dropped"


PENDING, TERMINAL, OPEN = State.PENDING, State.TERMINAL, Fetch.OPEN


class Entry:
    """One offset the consumer read: the only per-message state (a plain slots class).

    ``raw`` is what filters receive and ``payload`` the record it came from (``None``
    for an offset remembered terminal from commit metadata). ``targets``: every
    watcher the message is addressed to; ``round_targets``: those of the current
    delivery round (targets minus who acked or rejected before); ``pending``: round
    watchers not resolved yet. ``failed`` (this round), ``rejected`` and
    ``acked_before`` (cumulative) and ``attempts`` (per watcher) stay None on the fast
    path. ``rounds`` counts delivery rounds (the backoff's exponent).
    """

    __slots__ = ("acked_before", "attempts", "failed", "ledger", "offset", "payload",
                 "pending", "raw", "rejected", "round_targets", "rounds", "run", "size", "state",
                 "targets")

    def __init__(self, ledger: PartitionLedger, run: Slice, offset: int, state: State,
                 raw: Any = None, payload: Any = None) -> None:
        self.ledger = ledger
        self.run = run  # the slice it was admitted in: counts it until it is terminal
        self.offset = offset
        self.state = state
        self.raw = raw
        self.payload = payload
        self.targets: frozenset[str] = frozenset()
        self.round_targets: frozenset[str] = frozenset()
        self.pending = 0
        self.failed: dict[str, str] | None = None
        self.rejected: dict[str, str] | None = None
        self.acked_before: frozenset[str] | None = None
        self.attempts: dict[str, int] | None = None
        self.rounds = 1
        self.size = 0  # key + value bytes, counted in ``open_bytes`` until terminal

    def __repr__(self) -> str:
        return f"Entry({self.ledger.key}@{self.offset}, {self.state.value}, pending={self.pending})"


def _offset(entry: Entry) -> int:
    return entry.offset


class Slice:
    """A run of one partition's records read in one consumed batch, in offset order.

    A slice is kept in one of two forms:

    * *counted* (``entries`` is None): the run as read (``raws``, ``records``) and
      ``pending``, how many watchers still owe all of it; ``progress`` maps a watcher
      that resolved a prefix of it (a batch of at most ``BATCH_LIMIT``) to that prefix's
      length. Nothing exists per message: a clean acknowledgement of the whole slice is
      one decrement, and the slice settles (``state`` turns ``TERMINAL``) in O(1).
    * *itemised*: one :class:`Entry` per message. ``entries`` is the ledger's list
      (trimming cuts its terminal prefix), ``chunk`` the same entries aligned with the
      run (what the watchers' queues walk). A counted slice is itemised (never back) as
      soon as anything needs a per-message record: a failure, a rejection, events or
      staged state, a per-message watcher, a lookup by offset.

    ``open`` counts its offsets not terminal: at 0 the whole slice is behind the commit
    target's reach and :meth:`PartitionLedger.trim` drops it in one step.
    """

    __slots__ = ("chunk", "entries", "ledger", "n", "offsets", "open", "pending", "progress",
                 "raws", "records", "size", "state", "targets", "weigh")

    def __init__(self, ledger: PartitionLedger, weigh: Callable[[Any], int] | None = None,
                 itemised: bool = False) -> None:
        self.ledger = ledger
        self.weigh = weigh  # bytes of one message (None: not weighed)
        self.entries: list[Entry] | None = [] if itemised else None
        self.chunk: list[Entry] | None = None
        self.n = 0  # messages of a counted slice (``len`` of an itemised one)
        self.raws: list[Any] = []
        self.records: list[Any] = []
        self.offsets: list[int] | None = None  # kept once ``records`` are released
        self.open = 0
        self.pending = 0
        self.progress: dict[str, int] | None = None
        self.size = 0
        self.state = PENDING
        self.targets: frozenset[str] = frozenset()

    def __len__(self) -> int:
        return self.n if self.entries is None else len(self.entries)

    def first(self) -> int:
        """The lowest offset the slice holds (not empty)."""
        if self.entries is not None:
            return self.entries[0].offset
        return self.offsets[0] if self.offsets is not None else self.records[0].offset

    def last(self) -> int:
        if self.entries is not None:
            return self.entries[-1].offset
        return self.offsets[-1] if self.offsets is not None else self.records[-1].offset

    def counted_offsets(self) -> list[int]:
        """The offsets of a counted slice."""
        return self.offsets if self.offsets is not None else [r.offset for r in self.records]

    def __repr__(self) -> str:
        form = "counted" if self.entries is None else "itemised"
        return f"Slice({form}, {len(self)} from {self.first() if len(self) else None}, " \
               f"{self.open} open, pending={self.pending})"


@dataclass(slots=True)
class PartitionLedger:
    """One assigned partition in one generation.

    ``base`` is the committed position the ledger started from (None until known:
    a new group starts wherever ``auto.offset.reset`` puts it, learnt from the
    first message read), moved up to the floor by :meth:`trim`. ``remembered`` holds
    terminal offsets decoded from the commit metadata that have not been read yet in
    this generation. ``slices`` hold the entries from ``base`` on, in read order;
    ``count`` is how many (the distance from the floor to the last read), ``next`` one
    past the last offset read.
    """

    topic: str
    partition: int
    generation: int
    base: int | None = None
    remembered: set[int] = field(default_factory=set)
    slices: deque[Slice] = field(default_factory=deque)
    count: int = 0
    next: int = 0
    # How many of the entries are terminal: lets ``commit_target`` skip scanning for
    # terminal offsets above the target when there are none (the usual case).
    terminal: int = 0
    # A record below ``base`` was read and skipped (logged once per ledger).
    below_base_reported: bool = False
    fetch: Fetch = Fetch.OPEN
    # BOUNDED / REWINDING: the first offset not admitted, where reading resumes.
    resume_at: int = 0
    # How many entries are HELD (kept by hold/release: health reads it per scrape).
    held_count: int = 0
    # Key + value bytes of the entries not yet terminal (held in memory for watchers).
    open_bytes: int = 0
    key: Key = field(init=False)

    def __post_init__(self) -> None:
        self.key = (self.topic, self.partition)
        if self.base is not None:
            self.next = self.base

    def make(self, run: Slice, offset: int) -> Entry | None:
        """Record a freshly read offset in the itemised ``run``; the new entry, or None for
        a copy of one already read in this generation (a librdkafka re-fetch after
        pause/resume) or an offset below the committed position. A remembered terminal
        offset (guarantee 7) gets a ``TERMINAL`` entry: it is not handed out again."""
        if self.base is None:
            self.base = self.next = offset
        if offset < self.next:  # below the base, or read already
            return None
        self.next = offset + 1
        self.count += 1
        if offset in self.remembered:
            self.remembered.discard(offset)
            entry = Entry(self, run, offset, TERMINAL)
            self.terminal += 1
        else:
            entry = Entry(self, run, offset, PENDING)
            run.open += 1
        assert run.entries is not None
        run.entries.append(entry)
        return entry

    def admit(self, offset: int) -> Entry | None:
        """Record one freshly read offset (an itemised slice of its own); the new entry
        when it must be handed out. None for a remembered terminal offset, an offset
        below the committed position, and a copy of one already read (see :meth:`make`)."""
        run = Slice(self, itemised=True)
        entry = self.make(run, offset)
        if run.entries:
            self.slices.append(run)
        return entry if entry is not None and entry.state is PENDING else None

    def weigh(self, entry: Entry, size: int) -> None:
        """Count a handed-out entry's bytes until it turns terminal."""
        entry.size = size
        self.open_bytes += size

    def itemise(self, run: Slice) -> list[Entry]:
        """Give a counted slice one entry per message (the chunk, aligned with the run).

        Each entry is owed by the watchers that still owe the slice and had not resolved
        it up to there (``progress``); a settled slice's entries are terminal.
        """
        if run.chunk is not None:
            return run.chunk
        if run.entries is not None:  # itemised when read (PartitionLedger.admit)
            return [e for e in run.entries if e.state is PENDING]
        settled = run.state is not PENDING
        offsets = run.counted_offsets()
        chunk: list[Entry] = []
        if settled:
            for offset in offsets:
                entry = Entry(self, run, offset, run.state)
                entry.targets = entry.round_targets = run.targets
                chunk.append(entry)
        else:
            weigh, targets, pending = run.weigh, run.targets, run.pending
            ahead = sorted(run.progress.values()) if run.progress else []  # prefixes resolved
            for i, (raw, record) in enumerate(zip(run.raws, run.records, strict=True)):
                while ahead and ahead[0] <= i:
                    ahead.pop(0)
                entry = Entry(self, run, offsets[i], PENDING, raw, record)
                entry.targets = entry.round_targets = targets
                entry.pending = pending - len(ahead)
                if weigh is not None:
                    entry.size = weigh(raw)
                chunk.append(entry)
        run.chunk = chunk
        run.entries = list(chunk)
        run.raws = run.records = []
        run.offsets = run.progress = None
        return chunk

    def get(self, offset: int) -> Entry | None:
        """The entry of an offset from ``base`` on (O(slices + log slice): slow paths;
        itemises the slice it is in)."""
        for run in self.slices:
            if run.last() >= offset:
                if run.entries is None:
                    self.itemise(run)
                entries = run.entries
                assert entries is not None
                i = bisect_left(entries, offset, key=_offset)
                return entries[i] if i < len(entries) and entries[i].offset == offset else None
        return None

    def __iter__(self) -> Iterator[Entry]:
        """Every entry from ``base`` on, in read order (itemises every slice: slow paths)."""
        for run in list(self.slices):
            if run.entries is None:
                self.itemise(run)
            yield from run.entries or ()

    @property
    def entries(self) -> dict[int, Entry]:
        """Offset -> entry from ``base`` on (a new dict: O(entries), for tests)."""
        return {entry.offset: entry for entry in self}

    def open_offsets(self) -> Iterator[int]:
        """The offsets not terminal, in read order (without itemising: for status)."""
        for run in self.slices:
            if run.entries is None:
                if run.state is PENDING:
                    yield from run.counted_offsets()
            else:
                yield from (e.offset for e in run.entries if e.state is not TERMINAL)

    def finish(self, entry: Entry) -> None:
        """Mark an entry terminal and release what it held (record, rejections)."""
        if entry.state is State.HELD:
            self.held_count -= 1
        if entry.state is not State.TERMINAL:
            self.terminal += 1
            self.open_bytes -= entry.size
            entry.run.open -= 1
        entry.state = State.TERMINAL
        entry.raw = entry.payload = entry.rejected = entry.failed = None

    def settle(self, run: Slice) -> None:
        """Every watcher resolved a counted slice cleanly: all of it is terminal.

        Its messages are released. It is trimmed at once when nothing before it is
        open; otherwise (a floor below it) only its offsets are kept: they travel as
        terminal offsets above the target.
        """
        run.state = TERMINAL
        run.open = 0
        self.terminal += run.n
        self.open_bytes -= run.size
        run.raws = []
        self.trim()
        if run in self.slices:
            run.offsets = run.counted_offsets()
            run.records = []

    def commit_target(self) -> tuple[int, list[int]] | None:
        """``(offset to commit, terminal offsets above it)`` or None before anything is known.

        Drops terminal entries the target passes: once committed they need no memory.
        """
        if self.base is None:
            return None
        self.trim()
        target = self.base
        above: list[int] = []
        if self.terminal:
            for run in self.slices:
                if run.entries is None:
                    if run.state is TERMINAL:
                        above.extend(run.counted_offsets())
                else:
                    above.extend(e.offset for e in run.entries if e.state is TERMINAL)
        if self.remembered:
            self.remembered = {o for o in self.remembered if o >= target}
            above.extend(self.remembered)
        return target, above

    def trim(self) -> None:
        """Drop the terminal prefix: ``base`` becomes the floor (first unresolved offset),
        or one past the last offset read when nothing is outstanding.

        Settled slices go whole (O(1) each); only the first slice still open is looked
        into, to cut its terminal prefix.
        """
        if self.base is None:
            return
        slices = self.slices
        if self.terminal:
            while slices and not slices[0].open:  # settled: every entry terminal
                passed = len(slices.popleft())
                self.count -= passed
                self.terminal -= passed
            if slices:
                entries = slices[0].entries
                if entries is not None and entries[0].state is TERMINAL:
                    cut = 1
                    while entries[cut].state is TERMINAL:  # an open entry ends it
                        cut += 1
                    del entries[:cut]
                    self.count -= cut
                    self.terminal -= cut
        self.base = slices[0].first() if slices else self.next

    def hold(self, entry: Entry) -> None:
        """A watcher failed the entry: it is the floor until redelivered and resolved."""
        entry.state = State.HELD
        self.held_count += 1

    def release(self, entry: Entry) -> None:
        """A held entry is handed out again."""
        entry.state = State.PENDING
        self.held_count -= 1

    def drop(self) -> int:
        """The ledger ended: every entry is dropped; how many were pending or held."""
        open_entries = 0
        for run in self.slices:
            if run.entries is None:
                if run.state is PENDING:
                    open_entries += run.n
            else:
                for entry in run.entries:
                    if entry.state is State.PENDING or entry.state is State.HELD:
                        open_entries += 1
                    entry.state = State.DROPPED
            run.state = State.DROPPED
        self.slices.clear()
        self.count = 0
        return open_entries

    @property
    def at_bound(self) -> bool:
        """Paused for its bound, or not yet read again from where it stopped."""
        return self.fetch is not Fetch.OPEN


class PartitionLoad(NamedTuple):
    """One partition against its bounds (``max_in_flight``, ``max_in_flight_bytes``)."""

    distance: int
    open_bytes: int
    at_bound: bool


# Asks the consumer thread to pause a partition (None) or to seek it to an offset
# and resume it, for one generation.
FetchRequest = Callable[[Key, int, "int | None"], None]


class Ledger:
    """Every partition ledger of one consumer group, on the event loop.

    ``request`` reaches the consumer thread (pause, or seek and resume); ``skipped``
    is told of a record below a ledger's committed position (a recreated topic?).
    ``loads`` is a per-partition snapshot other threads (health, metrics) may copy.
    """

    def __init__(self, name: str, request: FetchRequest,
                 skipped: Callable[[PartitionLedger, int], None]) -> None:
        self.name = name
        self._request = request
        self._skipped = skipped
        self.partitions: dict[Key, PartitionLedger] = {}
        self.dirty: set[Key] = set()
        self._bounded: set[Key] = set()
        self.loads: dict[Key, tuple[PartitionLoad, int]] = {}
        self.bound: int | None = None
        self.bytes_bound = 2**62
        self.admitted = 0

    def set_bounds(self, max_in_flight: int, max_bytes: int | None = None) -> None:
        if max_in_flight < 1 or (max_bytes is not None and max_bytes < 1):
            raise ValueError("partition bounds must be at least 1")
        self.bound = max_in_flight
        self.bytes_bound = max_bytes if max_bytes is not None else 2**62

    # -- partitions come and go -------------------------------------------------------

    def start(self, generation: int,
              starts: Iterable[tuple[str, int, int | None, frozenset[int]]]) -> None:
        """Open ledgers: ``(topic, partition, committed offset or None, remembered)``."""
        for topic, partition, base, remembered in starts:
            ledger = PartitionLedger(topic, partition, generation, base, set(remembered))
            self.partitions[ledger.key] = ledger
            self._snapshot(ledger)

    def end(self, keys: Iterable[Key]) -> int:
        """Close ledgers (revoked, lost, topic recreated); how many of their entries were
        pending or held (they are dropped: late outcomes change nothing)."""
        dropped = 0
        for key in keys:
            ledger = self.partitions.pop(key, None)
            if ledger is not None:
                dropped += ledger.drop()
            self.loads.pop(key, None)
            self.dirty.discard(key)
            self._bounded.discard(key)
        return dropped

    def end_all(self) -> int:
        return self.end(list(self.partitions))

    def handed_out(self, keys: Iterable[Key]) -> int:
        """How many entries of these partitions are with the watchers, outcome unknown
        (``PENDING``; not held ones, which wait for their retry time). O(entries); asked
        only when partitions are about to be revoked."""
        handed = 0
        for key in keys:
            ledger = self.partitions.get(key)
            for run in () if ledger is None else ledger.slices:
                if run.entries is None:
                    handed += run.n if run.state is PENDING else 0
                else:
                    handed += sum(1 for e in run.entries if e.state is PENDING)
        return handed

    def current(self, record: LedgerRecord) -> tuple[PartitionLedger, Entry] | None:
        """The ledger and entry of a record if it belongs to the current generation."""
        ledger = self.partitions.get(record.partition_key)
        if ledger is None or ledger.generation != record.generation:
            return None
        entry = ledger.get(record.offset)
        return None if entry is None else (ledger, entry)

    # -- records in ---------------------------------------------------------------------

    def admit(self, items: Iterable[tuple[Any, Any]], size: Callable[[Any], int]) -> list[Slice]:
        """Record a consumed batch of ``(raw, record)``; its new slices, one per run of
        one partition's records (the usual batch: one), to hand out.

        Skipped: records of a ledger of another generation (raced a revocation), of a
        ledger not admitting (bounded or rewinding: read again later), remembered
        terminal offsets, offsets below the committed position (reported), and copies
        of offsets already read in this generation. A slice is counted (no entry per
        message) unless its partition still has remembered offsets to meet: then it is
        itemised as it is read, and its ``chunk`` is the entries to hand out.
        """
        out: list[Slice] = []
        partitions = self.partitions
        bound = self.bound
        bytes_bound = self.bytes_bound
        weigh = None if bound is None else size
        ledger: PartitionLedger | None = None
        run: Slice | None = None
        raws: list[Any] = []
        records: list[Any] = []
        for raw, record in items:
            if ledger is None or ledger.partition != record.partition or (
                    ledger.topic != record.topic):
                if run is not None:
                    self._close_run(run, out)
                    run = None
                ledger = partitions.get(record.partition_key)
                if ledger is None:
                    continue
            if ledger.generation != record.generation or ledger.fetch is not OPEN:
                continue
            offset = record.offset
            if offset < ledger.next or ledger.base is None:
                base = ledger.base
                if base is None:
                    ledger.base = ledger.next = offset
                elif offset < base:
                    self._skipped(ledger, offset)
                    continue
                else:
                    continue  # read already (a re-fetch)
            if run is None:
                run = Slice(ledger, weigh, itemised=bool(ledger.remembered))
                raws, records = run.raws, run.records
                ledger.slices.append(run)
            if run.entries is not None:  # itemised (remembered offsets ahead)
                entry = ledger.make(run, offset)
                if entry is None or entry.state is TERMINAL:
                    continue
                entry.raw = raw
                entry.payload = record
                if run.chunk is None:
                    run.chunk = []
                run.chunk.append(entry)
                if weigh is not None:
                    entry.size = weight = size(raw)
                    ledger.open_bytes += weight
            else:
                ledger.next = offset + 1
                ledger.count += 1
                raws.append(raw)
                records.append(record)
                if weigh is not None:
                    weight = size(raw)
                    run.size += weight
                    ledger.open_bytes += weight
            if bound is not None and (ledger.count >= bound or ledger.open_bytes >= bytes_bound):
                if run.entries is None:
                    run.n = run.open = len(raws)  # as far as read: trim looks at it
                ledger.trim()  # what resolved since the last publish is no distance
                if ledger.count >= bound or ledger.open_bytes >= bytes_bound:
                    self._stop_at_bound(ledger, offset + 1)
        if run is not None:
            self._close_run(run, out)
        return out

    def _close_run(self, run: Slice, out: list[Slice]) -> None:
        """The run of one partition ends: count it, or forget it if nothing was admitted."""
        if run.entries is None:
            run.n = run.open = len(run.raws)
            handed = run.n
        else:
            handed = len(run.chunk) if run.chunk is not None else 0
            if not run.entries:
                run.ledger.slices.remove(run)
                return
        self.admitted += handed
        if handed:
            out.append(run)

    def _stop_at_bound(self, ledger: PartitionLedger, resume_at: int) -> None:
        """Stop admitting at the bound and ask the consumer to pause the partition."""
        ledger.fetch = Fetch.BOUNDED
        ledger.resume_at = resume_at
        self._bounded.add(ledger.key)
        self._snapshot(ledger)
        self._request(ledger.key, ledger.generation, None)
        log.info("%s: %s[%d] paused: %d messages read above its floor, %d bytes unresolved "
                 "(max_in_flight, max_in_flight_bytes)", self.name, ledger.topic,
                 ledger.partition, ledger.count, ledger.open_bytes)

    def rewound(self, key: Key, generation: int) -> None:
        """The consumer sought a bounded partition back: it admits again."""
        ledger = self.partitions.get(key)
        if ledger is None or ledger.generation != generation:
            return
        ledger.fetch = Fetch.OPEN
        self._bounded.discard(key)
        self._snapshot(ledger)

    # -- outcomes -------------------------------------------------------------------------

    def is_current(self, entry: Entry) -> bool:
        return self.partitions.get(entry.ledger.key) is entry.ledger

    def hold(self, entry: Entry) -> None:
        """Some watcher failed the entry: it is its partition's floor until it resolves."""
        entry.ledger.hold(entry)
        self._snapshot(entry.ledger)

    def release(self, entry: Entry) -> bool:
        """A held entry's retry time came: True when it is to be handed out again."""
        if entry.state is not State.HELD or not self.is_current(entry):
            return False
        entry.ledger.release(entry)
        self._snapshot(entry.ledger)
        return True

    def finish(self, entry: Entry) -> None:
        """Every watcher acked (or rejected, and the dead letter is durable).

        A partition paused at its bound is released as soon as its floor moved far
        enough, not at the next publish.
        """
        ledger = entry.ledger
        ledger.finish(entry)
        self.dirty.add(ledger.key)
        if ledger.fetch is Fetch.BOUNDED:
            self._release(ledger)

    def finish_many(self, entries: Iterable[Entry]) -> None:
        """:meth:`finish` for ``PENDING`` entries every watcher acked (a batch's clean
        acknowledgement): the per-partition work (dirty mark, bound check) runs once per
        run of one partition's entries, not once per entry."""
        terminal = TERMINAL
        ledger: PartitionLedger | None = None
        for entry in entries:
            if entry.ledger is not ledger:
                if ledger is not None:
                    self._finished(ledger)
                ledger = entry.ledger
            entry.state = terminal
            entry.raw = entry.payload = None
            entry.run.open -= 1
            ledger.terminal += 1
            ledger.open_bytes -= entry.size
        if ledger is not None:
            self._finished(ledger)

    def settle(self, run: Slice) -> None:
        """Every watcher resolved a counted slice cleanly: it is terminal (O(1))."""
        ledger = run.ledger
        ledger.settle(run)
        self._finished(ledger)

    def _finished(self, ledger: PartitionLedger) -> None:
        self.dirty.add(ledger.key)
        if ledger.fetch is Fetch.BOUNDED:
            self._release(ledger)

    def delivering(self, record: LedgerRecord) -> bool:
        """Whether a record still waits for its dead letter (a resend is worth it)."""
        found = self.current(record)
        return found is not None and found[1].state is State.DELIVERING

    def delivered(self, entry: Entry) -> bool:
        """A rejected entry's dead letter is durable: it is terminal. True if it changed."""
        if entry.state is not State.DELIVERING or not self.is_current(entry):
            return False
        self.finish(entry)
        return True

    # -- targets out ---------------------------------------------------------------------

    def publish(self) -> dict[Key, Target]:
        """The commit targets of the partitions that changed since the last publish.

        Costs what changed (a ledger with a held floor and many terminal offsets above
        it lists them, at most its bound). Also refreshes the snapshot health and
        metrics read, and lifts bounds whose floor moved.
        """
        self._release_bounded()
        if not self.dirty:
            return {}
        published: dict[Key, Target] = {}
        partitions = self.partitions
        for key in self.dirty:
            ledger = partitions.get(key)
            if ledger is None:
                continue
            target = ledger.commit_target()
            if target is not None:
                published[key] = (ledger.generation, target[0], tuple(target[1]))
            self._snapshot(ledger)
        self.dirty.clear()
        return published

    def _release_bounded(self) -> None:
        """Rewind the bounded ledgers whose floor moved: at most half of both bounds left."""
        for key in list(self._bounded):
            ledger = self.partitions.get(key)
            if ledger is not None and ledger.fetch is Fetch.BOUNDED:
                self._release(ledger)

    def _release(self, ledger: PartitionLedger) -> None:
        bound = self.bound
        if bound is None or ledger is not self.partitions.get(ledger.key):
            return
        ledger.trim()
        if ledger.count <= bound // 2 and ledger.open_bytes <= self.bytes_bound // 2:
            ledger.fetch = Fetch.REWINDING
            self._request(ledger.key, ledger.generation, ledger.resume_at)

    def _snapshot(self, ledger: PartitionLedger) -> None:
        """Refresh what health and metrics see (held counts change at once, distances and
        bytes at the next publish)."""
        self.loads[ledger.key] = (PartitionLoad(ledger.count, ledger.open_bytes,
                                                ledger.at_bound), ledger.held_count)

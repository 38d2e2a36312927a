"""One partition's ledger: the slices and entries of what it read, its floor and target.

:class:`PartitionLedger` is one assigned partition in one assignment generation; the
group-wide :class:`~sharedstream.core.ledger.Ledger` (admission, bounds, publishing)
owns one per partition. The invariants both keep are stated in
:mod:`sharedstream.core.ledger`; the states of an offset are :class:`State`'s.

Failure window: none of its own; it lives in memory with the ledger that owns it.
"""

from __future__ import annotations

import enum
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

Key = tuple[str, int]


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
    path. ``rounds`` counts delivery rounds (the backoff's exponent); ``retry_at``: the
    clock time a failure of this round said trying again can succeed (None: backoff only).
    """

    __slots__ = ("acked_before", "attempts", "failed", "ledger", "offset", "payload",
                 "pending", "raw", "rejected", "retry_at", "round_targets", "rounds", "run",
                 "size", "state", "targets")

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
        self.retry_at: float | None = None
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

    In a routed group, ``targets`` are the watchers that take every message (no match)
    and ``shares`` the parts of it routed to each watcher with a match:
    ``pending`` counts both, a share until its watcher resolved all of it.
    """

    __slots__ = ("chunk", "entries", "ledger", "n", "offsets", "open", "pending", "progress",
                 "raws", "records", "shares", "size", "state", "targets", "weigh")

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
        self.shares: OwedShares | None = None

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


class OwedShares(Protocol):
    """What the ledger asks of a routed slice's shares (one per watcher with a match it
    was routed to): what they still owe. :class:`~sharedstream.core.shares.Shares` is one."""

    def owed(self, n: int) -> tuple[int, list[tuple[int, frozenset[str]] | None]]:
        """How many shares still owe all of it, and per position (shares owing it,
        watchers it was routed to), or None where it was routed to none."""


@dataclass(slots=True)
class PartitionLedger:
    """One assigned partition in one generation.

    ``base`` is the committed position the ledger started from (None until known:
    a new group starts wherever ``auto.offset.reset`` puts it, learnt from the
    first message read), moved up to the floor by :meth:`trim`. ``remembered`` holds
    terminal offsets decoded from the commit metadata that have not been read yet in
    this generation; ``held``, offsets that watchers still owed when the partition was
    last owned (:mod:`sharedstream.core.holds`), with those watchers, until read.
    ``slices`` hold the entries from ``base`` on, in read order;
    ``count`` is how many (the distance from the floor to the last read), ``next`` one
    past the last offset read; :attr:`kept`, how many of them no watcher is handling
    (what the partition's bound counts).
    """

    topic: str
    partition: int
    generation: int
    base: int | None = None
    remembered: set[int] = field(default_factory=set)
    held: dict[int, frozenset[str]] = field(default_factory=dict)
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
    # How many entries are DELIVERING (resolved, their dead letters not durable yet).
    delivering: int = 0
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
        it up to there (``progress``); a settled slice's entries are terminal. Entries
        nobody owes any more (``pending`` 0: a prefix every owing watcher acked) are left
        pending for the group's ``itemise`` to settle, which owns the counters they move.
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
            owing_shares, routed = run.shares.owed(run.n) if run.shares else (0, None)
            pending -= owing_shares  # what the watchers taking everything still owe
            ahead = sorted(run.progress.values()) if run.progress else []  # prefixes resolved
            for i, (raw, record) in enumerate(zip(run.raws, run.records, strict=True)):
                while ahead and ahead[0] <= i:
                    ahead.pop(0)
                entry = Entry(self, run, offsets[i], PENDING, raw, record)
                entry.pending = pending - len(ahead)
                share = None if routed is None else routed[i]
                if share is not None:
                    owing, names = share
                    entry.pending += owing
                    entry.targets = entry.round_targets = targets | names
                else:
                    entry.targets = entry.round_targets = targets
                if weigh is not None:
                    entry.size = weigh(raw)
                chunk.append(entry)
        run.chunk = chunk
        run.entries = list(chunk)
        run.raws = run.records = []
        run.offsets = run.progress = None
        return chunk

    def get(self, offset: int, itemise: bool = True) -> Entry | None:
        """The entry of an offset from ``base`` on (O(slices + log slice): slow paths;
        itemises the slice it is in, or, with ``itemise`` False, finds none in a counted
        slice: what is held or delivering is always itemised).

        Itemising here settles nothing the watchers acked of the slice before (the
        group's ``itemise`` does): a lookup for a held entry passes False."""
        for run in self.slices:
            if run.last() >= offset:
                if run.first() > offset:
                    return None  # below the base, or in a gap between slices
                if run.entries is None:
                    if not itemise:
                        return None
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

    def deliver(self, entry: Entry) -> None:
        """Every watcher resolved the entry and some rejected it: terminal once its dead
        letter is durable."""
        entry.state = State.DELIVERING
        self.delivering += 1

    def finish(self, entry: Entry) -> None:
        """Mark an entry terminal and release what it held (record, rejections)."""
        if entry.state is State.HELD:
            self.held_count -= 1
        elif entry.state is State.DELIVERING:
            self.delivering -= 1
        if entry.state is not State.TERMINAL:
            self.terminal += 1
            self.open_bytes -= entry.size
            entry.run.open -= 1
        entry.state = State.TERMINAL
        entry.raw = entry.payload = entry.rejected = entry.failed = None

    def settle(self, run: Slice) -> None:
        """Every watcher resolved a counted slice cleanly: all of it is terminal.

        Its messages are released. When nothing before it is open (the usual case) it is
        trimmed at once, while its records are still in the CPU's caches: kept until the
        commit tick, a tenth of a second of decoded values would outnumber the collector's
        young generation and be freed cold. Under an open slice (a floor below it) only
        its offsets are kept, which travel as terminal offsets above the target.
        """
        run.state = TERMINAL
        run.open = 0
        self.terminal += run.n
        self.open_bytes -= run.size
        run.raws = []
        # A routed slice and its shares point at each other (``Share.run``): owed
        # nothing now, the shares are dropped, so that the messages their lists hold are
        # freed here too, not left to the collector with the cycle.
        run.shares = None
        for earlier in self.slices:
            if earlier is run:
                self.trim()
                return
            if earlier.open:
                break
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
                run = slices.popleft()
                passed = len(run)
                self.count -= passed
                self.terminal -= passed
                # Entries point back at their slice: let go of them here, or every dropped
                # itemised slice would be a cycle only the garbage collector frees.
                run.entries = run.chunk = None
                run.n = passed
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
        self.count = self.delivering = 0
        return open_entries

    @property
    def kept(self) -> int:
        """Entries kept above the floor that no watcher is handling now: resolved
        (terminal until :meth:`trim`, or waiting for a dead letter) or held (for a retry,
        or for an absent watcher). What the watchers are handling is the group's flight
        (``max_in_flight``, core/flowcontrol.py), bounded there."""
        return self.terminal + self.delivering + self.held_count

    @property
    def at_bound(self) -> bool:
        """Paused for its bound, or not yet read again from where it stopped."""
        return self.fetch is not Fetch.OPEN


__all__ = ["OPEN", "PENDING", "TERMINAL", "Entry", "Fetch", "Key", "OwedShares",
           "PartitionLedger", "Slice", "State"]

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
5. Per partition, messages above the floor that no watcher is handling (resolved, or
   held) ``<= max_in_flight`` and unresolved bytes ``<= max_in_flight_bytes``, up to one
   record: at the bound the partition stops admitting and asks to be paused; what was
   read past it is read again after a seek. What the watchers are handling is the
   group's flight (core/flowcontrol.py: a pause that keeps the prefetch); counting it
   here too made one busy partition re-read its records.
6. An outcome of an earlier generation (the partition was revoked, lost or its
   topic recreated since) changes nothing.
7. Publishing costs what changed since the last publish.
8. A counted slice is wholly pending or wholly terminal; its ``pending`` counts the
   watchers that have not resolved all of it, and ``progress`` the prefix each of them
   resolved, so itemising it gives every entry exactly the watchers still owing it.
9. An offset remembered as ``held`` for some watchers (written by an earlier owner:
   :mod:`sharedstream.core.holds`) goes to the others as read, and to those watchers
   only as a retry; a partition with remembered holds ahead is itemised as it is read.

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
the last commit (attempts, terminal offsets of the last commit interval) is lost; the
broker hands those offsets out again from the committed position. Holds a watcher may
have moved past are not lost: they are written with its units of work
(:mod:`sharedstream.core.holds`) and come back to the next ledger as ``held``, which
hands them to those watchers as retries.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

from sharedstream.core.partition import (
    OPEN,
    PENDING,
    TERMINAL,
    Entry,
    Fetch,
    Key,
    PartitionLedger,
    Slice,
    State,
)
from sharedstream.core.reads import LedgerRecord, PartitionRun, ReadBatch

log = logging.getLogger(__name__)
# What the consumer thread is told per partition: (generation, offset to commit,
# terminal offsets above it).
Target = tuple[int, int, tuple[int, ...]]


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

    Bigger than 25 methods: one method per event of a partition's life (start, admit,
    hold, release, finish, settle, deliver, publish, end) and their batched forms, the
    hot path's entry points, each O(what changed); splitting them would put one
    partition's state behind two objects.
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
              starts: Iterable[tuple[str, int, int | None, frozenset[int]]],
              held: Mapping[Key, Mapping[int, frozenset[str]]] | None = None) -> None:
        """Open ledgers: ``(topic, partition, committed offset or None, remembered)``, and
        the holds remembered for each (``held``: offset -> watchers that still owe it)."""
        for topic, partition, base, remembered in starts:
            ledger = PartitionLedger(topic, partition, generation, base, set(remembered),
                                     dict(held.get((topic, partition), {})) if held else {})
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
        """The ledger and entry of a record if it belongs to the current generation and is
        itemised (a lookup never itemises a counted slice: only the group may, since it
        settles what the watchers acked of it before)."""
        ledger = self.partitions.get(record.partition_key)
        if ledger is None or ledger.generation != record.generation:
            return None
        entry = ledger.get(record.offset, itemise=False)
        return None if entry is None else (ledger, entry)

    # -- records in ---------------------------------------------------------------------

    def admit(self, items: Iterable[tuple[Any, Any]], size: Callable[[Any], int],
              counted: bool = True) -> list[Slice]:
        """Record a consumed batch of ``(raw, record)``; its new slices, one per partition
        read (in the order first read), to hand out.

        Skipped: records of a ledger of another generation (raced a revocation), of a
        ledger not admitting (bounded or rewinding: read again later), remembered
        terminal offsets, offsets below the committed position (reported), and copies
        of offsets already read in this generation. A slice is counted (no entry per
        message) when ``counted`` and its partition has no remembered offsets left to
        meet; otherwise it is itemised as it is read, and its ``chunk`` is the entries to
        hand out.
        """
        runs: dict[Key, Slice] = {}  # this batch's slice of each partition
        if type(items) is ReadBatch:
            pairs: list[tuple[Any, Any]] = []
            for part in items.parts:
                if isinstance(part, tuple):
                    pairs.append(part)
                    continue
                if pairs:
                    self._admit_pairs(pairs, size, counted, runs)
                    pairs = []
                if not (counted and self._admit_run(part, size, runs)):
                    self._admit_pairs([(read, read) for read in part.reads], size, counted,
                                      runs)
            if pairs:
                self._admit_pairs(pairs, size, counted, runs)
        else:
            self._admit_pairs(items, size, counted, runs)
        out: list[Slice] = []
        for run in runs.values():
            self._close_run(run, out)
        return out

    def _admit_run(self, part: PartitionRun, size: Callable[[Any], int],
                   runs: dict[Key, Slice]) -> bool:
        """Admit a run of one partition's reads into a counted slice at once; False (nothing
        done) unless that is exactly what admitting them one by one would do.

        That is: the ledger is of the run's generation and admits (or the run is skipped
        whole), its base is known, no remembered offset is left to meet, nothing in the
        run was read already, this batch's slice of the partition (if any) is counted,
        and the whole run stays under both bounds (the bound is checked after each
        record one by one: fresh records are pending, so only the bytes grow).
        """
        ledger = self.partitions.get(part.key)
        if ledger is None or ledger.generation != part.generation or ledger.fetch is not OPEN:
            return True  # every record of it would be skipped
        reads = part.reads
        n = len(reads)
        bound = self.bound
        if ledger.base is None or ledger.remembered or ledger.held or (
                reads[0].offset < ledger.next) or (
                bound is not None and (ledger.kept >= bound or
                                       ledger.open_bytes + part.size >= self.bytes_bound)):
            return False
        run = runs.get(ledger.key)
        if run is None:
            run = runs[ledger.key] = Slice(ledger, None if bound is None else size)
            ledger.slices.append(run)
            run.records = reads
            run.raws = reads[:]  # handed to batch watchers: never the ledger's own list
        elif run.entries is not None:
            return False
        else:
            run.raws += reads
            run.records += reads
        ledger.next = part.last + 1
        ledger.count += n
        if bound is not None:
            run.size += part.size
            ledger.open_bytes += part.size
        return True

    def _admit_pairs(self, items: Iterable[tuple[Any, Any]], size: Callable[[Any], int],
                     counted: bool, runs: dict[Key, Slice]) -> None:
        """Admit ``(raw, record)`` pairs one by one into this batch's slices (``runs``)."""
        partitions = self.partitions
        bound = self.bound
        bytes_bound = self.bytes_bound
        weigh = None if bound is None else size
        ledger: PartitionLedger | None = None
        run: Slice | None = None
        raws: list[Any] = []
        records: list[Any] = []
        chunk: list[Entry] = []
        for raw, record in items:
            if ledger is None or ledger.partition != record.partition or (
                    ledger.topic != record.topic):
                ledger = partitions.get(record.partition_key)
                if ledger is None:
                    continue
                run = runs.get(ledger.key)
                if run is not None:
                    raws, records = run.raws, run.records
                    if run.chunk is not None:
                        chunk = run.chunk
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
                run = runs[ledger.key] = Slice(ledger, weigh, itemised=not counted or bool(
                    ledger.remembered or ledger.held))
                raws, records = run.raws, run.records
                if run.entries is not None:
                    chunk = run.chunk = []
                ledger.slices.append(run)
            if run.entries is not None:  # itemised
                if ledger.remembered:  # remembered offsets ahead: PartitionLedger.make
                    entry = ledger.make(run, offset)
                    if entry is None or entry.state is TERMINAL:
                        continue
                    entry.raw = raw
                    entry.payload = record
                else:  # PartitionLedger.make inlined for the usual record
                    ledger.next = offset + 1
                    ledger.count += 1
                    run.open += 1
                    entry = Entry(ledger, run, offset, PENDING, raw, record)
                    run.entries.append(entry)
                chunk.append(entry)
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
            if bound is not None and (ledger.kept >= bound or
                                      ledger.open_bytes >= bytes_bound):
                if run.entries is None:
                    run.n = run.open = len(raws)  # as far as read: trim looks at it
                ledger.trim()  # the resolved prefix since the last publish is no distance
                if ledger.kept >= bound or ledger.open_bytes >= bytes_bound:
                    self._stop_at_bound(ledger, offset + 1)

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
        log.info("%s: %s[%d] paused: %d messages resolved or held above its floor (%d "
                 "read), %d bytes unresolved (max_in_flight, max_in_flight_bytes)",
                 self.name, ledger.topic, ledger.partition, ledger.kept, ledger.count,
                 ledger.open_bytes)

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
        if ledger.kept <= bound // 2 and ledger.open_bytes <= self.bytes_bound // 2:
            ledger.fetch = Fetch.REWINDING
            self._request(ledger.key, ledger.generation, ledger.resume_at)

    def _snapshot(self, ledger: PartitionLedger) -> None:
        """Refresh what health and metrics see (held counts change at once, distances and
        bytes at the next publish)."""
        self.loads[ledger.key] = (PartitionLoad(ledger.count, ledger.open_bytes,
                                                ledger.at_bound), ledger.held_count)


__all__ = ["Entry", "Fetch", "FetchRequest", "Key", "Ledger", "LedgerRecord", "PartitionLedger",
           "PartitionLoad", "Slice", "State", "Target"]

"""A group's fan-out: each consumed batch admitted to the ledger and handed out.

Without matches every message goes to every present watcher: a batch's slice stays
*counted* (no entry per message) and goes to each watcher as one chunk when every
present watcher takes batches and none of the cohort is missing; otherwise it is
itemised and the entries go out the same way, a replayed dead letter alone to the
watchers it names. With matches (issue 42) the batch is *routed*
(:mod:`sharedstream.core.routes`): the watchers without a match get it whole, each
watcher with one only what its match takes (a :class:`~sharedstream.core.shares.Share`
of a counted slice, or its own list of entries), and a message nobody wants settles at
once. Either way the cost is one call per receiving watcher per batch and, per message,
its admission and (routed) its lookup: nothing per message scans every watcher. Every
present watcher gets every message it is due, however full its queue: a watcher that
lags pauses the flow (:mod:`sharedstream.core.flowcontrol`), it is never failed for it.

:class:`Fanout` is a base of :class:`~sharedstream.core.group.Group`, which sets the
fields it declares; the group methods it calls back into are declared here as
attributes, so this module does not import the group's (as
:class:`~sharedstream.core.resolution.Resolution` does).

Failure window: none of its own; what it hands out lives in the ledger.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from itertools import chain
from typing import Any

from sharedstream import tracing
from sharedstream.core.contract import SharedStreamProducer
from sharedstream.core.counters import GroupCounters
from sharedstream.core.holds import HoldJournal, HoldKey
from sharedstream.core.ledger import Entry, Ledger, Slice
from sharedstream.core.routes import Routes
from sharedstream.core.routing import RoutingIndex
from sharedstream.core.stream import SharedStream
from sharedstream.core.streamconfig import ABSENT, HELD_BEFORE, ManagerSettings

NOT_IN_COHORT = "not in the cohort"


class Fanout:
    """Admission and hand-out of consumed batches (a base of ``Group``)."""

    cohort: frozenset[str]
    producer: SharedStreamProducer[Any]
    settings: ManagerSettings
    ledger: Ledger
    counters: GroupCounters
    streams: dict[str, SharedStream]
    routes: Routes
    in_flight: int
    _present: list[SharedStream]
    _absent: dict[str, str] | None
    _everyone: list[SharedStream]
    _all_batch: bool  # every present watcher takes batches
    holds: HoldJournal | None
    # The group's own methods the fan-out calls back into.
    _members: Callable[[], list[SharedStream]]
    _schedule_publish: Callable[[], None]
    _check_pause: Callable[[Iterable[SharedStream]], None]
    _resolved: Callable[[Entry], None]
    _settle_slice: Callable[[Slice], None]
    owe: Callable[[Entry, Iterable[str]], None]

    def _broadcast(self, items: Sequence[tuple[Any, Any]]) -> None:
        self._members()
        index = self.routes.index()
        if index is not None:
            self._route(items, index)
            return
        present, absent = self._present, self._absent
        # A slice stays counted (no entry per message) when every watcher it goes to
        # takes batches and none is missing: anything else needs per-message records.
        counted = bool(present) and absent is None and tracing.tracer is None and all(
            stream.batch for stream in present)
        slices = self.ledger.admit(items, self.producer.size, counted)
        self._schedule_publish()
        if not slices:
            return
        n_present = len(present)
        cohort = self.cohort
        for run in slices:
            run.targets = cohort
            run.pending = n_present
            if counted and run.entries is None and [
                    r.targets for r in run.records].count(None) == run.n:
                self.counters.received += run.n
                self.in_flight += run.n
                for stream in present:
                    stream.offer(run)
            else:
                entries = run.ledger.itemise(run)
                self.counters.received += len(entries)
                self.in_flight += len(entries)
                self._broadcast_entries(entries, present, absent)
        self._check_pause(present)  # before waking: it tells the busy from the waiting
        for stream in present:
            stream.wake()

    def _broadcast_entries(self, entries: list[Entry], present: list[SharedStream],
                           absent: dict[str, str] | None) -> None:
        """Hand out an itemised slice: targeted messages (replayed dead letters, remembered
        holds) alone, and a failure record per message for the watchers that are missing."""
        cohort = self.cohort
        n_present = len(present)
        held = entries[0].ledger.held if entries else None
        run = 0  # where the run of entries addressed to everyone, not yet offered, starts
        for i, entry in enumerate(entries):
            targets = entry.payload.targets
            owed = held.pop(entry.offset, None) if held else None
            if owed is not None:  # not rows of another group, nor watchers a replay skips
                owed &= cohort if targets is None else targets
            if targets is None and not owed:
                entry.targets = entry.round_targets = cohort
                entry.pending = n_present
                if absent is not None:
                    entry.failed = dict(absent)
                    self.owe(entry, absent)
                if not n_present:
                    self._resolved(entry)
            else:  # a replayed dead letter or a remembered hold: what precedes goes first
                if run < i:
                    self._offer(present, entries[run:i])
                run = i + 1
                entry.targets = cohort if targets is None else targets
                if owed:
                    self._remembered_hold(entry, owed)
                else:
                    self._deliver(entry, entry.targets)
        self._done_with_held(held, entries)
        if n_present and run < len(entries):
            self._offer(present, entries if not run else entries[run:])

    def _route(self, items: Sequence[tuple[Any, Any]], index: RoutingIndex) -> None:
        """Hand a consumed batch out as the group's matches say (``core.routes``): to the
        watchers taking everything as one chunk each, and to each watcher with a match
        the part of it its match took, in order; what nobody wants settles at once.

        Counted when every present watcher takes batches and none is missing: per slice,
        one share per watcher routed something and one count each, nothing per message
        but its lookup. Otherwise entries, each addressed to its own watchers.
        """
        everyone, absent = self._everyone, self._absent
        counted = absent is None and tracing.tracer is None and self._all_batch
        slices = self.ledger.admit(items, self.producer.size, counted)
        self._schedule_publish()
        if not slices:
            return
        woken: list[SharedStream] = []
        for run in slices:
            if counted and run.entries is None and [
                    r.targets for r in run.records].count(None) == run.n:
                self._route_counted(run, index, everyone, woken)
            else:
                entries = run.ledger.itemise(run)
                self.counters.received += len(entries)
                self.in_flight += len(entries)
                self._route_entries(entries, index, everyone, absent, woken)
        self._check_pause(chain(everyone, woken))  # before waking, as in _broadcast
        for stream in everyone:
            stream.wake()
        for stream in woken:
            stream.offered()  # a batch runner waiting for them handles them now

    def _route_counted(self, run: Slice, index: RoutingIndex, everyone: list[SharedStream],
                       woken: list[SharedStream]) -> None:
        n = run.n
        self.counters.received += n
        self.in_flight += n
        run.targets = self.routes.everyone
        shares, unrouted = self.routes.share(run, index)
        run.shares = shares
        run.pending = len(everyone) + len(shares)
        if not everyone:
            self.counters.unrouted += unrouted
        if not run.pending:
            self._settle_slice(run)
            return
        for stream in everyone:
            stream.offer(run)
        streams = self.streams
        for share in shares:
            stream = streams[share.watcher]
            stream.offer(share)
            woken.append(stream)

    def _route_entries(self, entries: list[Entry], index: RoutingIndex,
                       everyone: list[SharedStream], absent: dict[str, str] | None,
                       woken: list[SharedStream]) -> None:
        """The itemised hand-out: each entry addressed to the watchers taking everything
        and to those its match routes it to; a missing one is failed for it (held), a
        replayed dead letter goes to the watchers it names, in its place in the order."""
        routed_absent = None if absent is None else self.routes.absent_routed(absent)
        failed_everyone = None if absent is None else self.routes.absent_everyone(absent)
        targets_everyone = self.routes.everyone
        n_everyone = len(everyone)
        common: list[Entry] = []
        chunks: dict[str, list[Entry]] = {}
        held = entries[0].ledger.held if entries else None
        for entry in entries:
            named = entry.payload.targets
            owed = held.pop(entry.offset, None) if held else None
            if owed is not None:  # the hold's watchers that this message still goes to
                owed &= (named if named is not None else
                         self.routes.targets(index.route(entry.raw)))
            if named is not None or owed:  # alone, and what precedes it goes first
                self._offer_routed(everyone, common, chunks, woken)
                common, chunks = [], {}
                if owed:
                    entry.targets = (named if named is not None else
                                     self.routes.targets(index.route(entry.raw)))
                    self._remembered_hold(entry, owed)
                else:
                    assert named is not None
                    entry.targets = named
                    self._deliver(entry, named)
                woken.extend(s for s in map(self.streams.get, entry.targets) if s is not None)
                continue
            names = index.route(entry.raw)
            pending = n_everyone
            failed = failed_everyone
            if names:
                entry.targets = entry.round_targets = self.routes.targets(names)
                for name in names:
                    if routed_absent is not None and name in routed_absent:
                        failed = {**(failed or {}), name: routed_absent[name]}
                        continue
                    chunk = chunks.get(name)
                    if chunk is None:
                        chunks[name] = [entry]
                    else:
                        chunk.append(entry)
                    pending += 1
            else:
                entry.targets = entry.round_targets = targets_everyone
                if not targets_everyone:
                    self.counters.unrouted += 1
            if failed is not None:
                entry.failed = dict(failed)
                self.owe(entry, failed)
            entry.pending = pending
            if n_everyone:
                common.append(entry)
            if not pending:
                self._resolved(entry)
        self._done_with_held(held, entries)
        self._offer_routed(everyone, common, chunks, woken)

    def _remembered_hold(self, entry: Entry, owed: frozenset[str]) -> None:
        """A message some watchers still owed when the partition was last owned (the
        process died, or the partition moved: core/holds.py): it goes to the others of its
        targets as any message read again, and to those watchers as a retry after its
        backoff, marked ``catching_up``, as if they had just failed it (no attempt)."""
        holds = self.holds
        if holds is not None:
            topic, partition = entry.ledger.key
            for watcher in owed:
                holds.loaded(HoldKey(watcher, topic, partition, entry.offset))
        self._deliver(entry, entry.targets - owed, dict.fromkeys(owed, HELD_BEFORE))

    @staticmethod
    def _done_with_held(held: dict[int, frozenset[str]] | None, entries: list[Entry]) -> None:
        if held and entries and max(held) < entries[-1].offset:
            held.clear()  # offsets never read (compacted away): stop itemising for them

    def _offer_routed(self, everyone: list[SharedStream], common: list[Entry],
                      chunks: dict[str, list[Entry]], woken: list[SharedStream]) -> None:
        if common:
            self._offer(everyone, common)
        streams = self.streams
        for name, chunk in chunks.items():
            stream = streams[name]
            stream.offer(chunk)
            woken.append(stream)

    @staticmethod
    def _offer(present: list[SharedStream], chunk: list[Entry]) -> None:
        for stream in present:
            stream.offer(chunk)

    def _deliver(self, entry: Entry, targets: frozenset[str],
                 failed: dict[str, str] | None = None) -> None:
        """Slow path: a targeted message or a redelivery round (``failed``: the watchers
        failed for it already, outside ``targets``)."""
        entry.round_targets = targets
        entry.failed = failed
        pending = 0
        for name in targets:
            stream = self.streams.get(name)
            if stream is not None:
                stream.offer([entry])
                pending += 1
            elif name in self.cohort:
                if entry.failed is None:
                    entry.failed = {}
                entry.failed[name] = ABSENT
                self.owe(entry, (name,))
            else:
                # A replayed dead letter naming a watcher that no longer exists goes
                # back to the dead-letter topic rather than vanishing.
                if entry.rejected is None:
                    entry.rejected = {}
                entry.rejected[name] = NOT_IN_COHORT
        entry.pending = pending
        if not pending:
            self._resolved(entry)

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

:class:`Fanout` is one of the group's parts (:mod:`sharedstream.core.group`), with its
own state: the view of the present watchers it hands out to (rebuilt once per change
of membership, when next used, not per subscribe). It counts what it hands out into
the flow control's ``in_flight`` and reports each batch to it; what needs settling at
once (nobody wants it, nobody is present) and every targeted round go to the
:class:`~sharedstream.core.resolution.Resolution`. It never calls the group, so this
module does not import the group's.

Failure window: none of its own; what it hands out lives in the ledger.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import chain
from typing import Any

from sharedstream import tracing
from sharedstream.core.contract import SharedStreamProducer
from sharedstream.core.counters import GroupCounters
from sharedstream.core.flowcontrol import FlowControl
from sharedstream.core.ledger import Entry, Ledger, Slice
from sharedstream.core.resolution import Resolution
from sharedstream.core.routes import Routes
from sharedstream.core.routing import RoutingIndex
from sharedstream.core.shares import Ready, Shares
from sharedstream.core.stream import SharedStream
from sharedstream.core.streamconfig import ABSENT
from sharedstream.core.targets import CommitTargets


class Fanout:
    """Admission and hand-out of consumed batches (a part of ``Group``)."""

    def __init__(self, cohort: frozenset[str], producer: SharedStreamProducer[Any],
                 ledger: Ledger, counters: GroupCounters, streams: Mapping[str, SharedStream],
                 routes: Routes, flow: FlowControl, resolution: Resolution,
                 targets: CommitTargets) -> None:
        self.cohort = cohort
        self.ledger = ledger
        self.counters = counters
        self.routes = routes
        self._size = producer.size
        self._streams = streams  # the group's: who is present, by name
        self._flow = flow
        self._resolution = resolution
        self._targets = targets
        # The present streams, those missing (name -> why), those taking everything
        # (the flow control watches them), whether every present one takes batches:
        # rebuilt by ``members`` after ``changed``.
        self._present: list[SharedStream] = []
        self._absent: dict[str, str] | None = dict.fromkeys(cohort, ABSENT)
        self._everyone: list[SharedStream] = []
        self._all_batch = False
        self._stale = True
        self.ready: Ready = {}
        """The batch runners whose task waits with nothing queued, by watcher: a share
        routed to one of them is called at once (``_give``). Each stream keeps its own
        runner listed while that holds, so the fan-out reads one entry per share and
        touches nothing else of the watcher's (its stream, queue and task's future were
        a third of a routed call at 10,000 watchers, each a cache miss)."""

    def changed(self) -> None:
        """A watcher came or went: the view of who is present is rebuilt when next used."""
        self._stale = True

    def members(self) -> list[SharedStream]:
        """The present streams, brought up to date after watchers came or went: once per
        change, when next asked, not per subscribe (10,000 watchers subscribing one by
        one would otherwise cost O(watchers) each)."""
        if self._stale:
            self._stale = False
            self._present = list(self._streams.values())
            absent = self.cohort - self._streams.keys()
            self._absent = dict.fromkeys(absent, ABSENT) if absent else None
            routed = self.routes.routed
            self._everyone = ([s for s in self._present if s.name not in routed] if routed
                              else self._present)
            # A batch runner marks its stream as it subscribes, before anything awaits.
            self._all_batch = all(s.batch for s in self._present)
        return self._present

    def hand_out(self, items: Sequence[tuple[Any, Any]]) -> None:
        """Admit a consumed batch and hand it out (see the module docstring)."""
        present = self.members()
        index = self.routes.index()
        if index is not None:
            self._route(items, index)
            return
        absent = self._absent
        # A slice stays counted (no entry per message) when every watcher it goes to
        # takes batches and none is missing: anything else needs per-message records.
        counted = bool(present) and absent is None and tracing.tracer is None and all(
            stream.batch for stream in present)
        slices = self.ledger.admit(items, self._size, counted)
        self._targets.schedule()
        if not slices:
            return
        n_present = len(present)
        cohort = self.cohort
        flow = self._flow
        for run in slices:
            run.targets = cohort
            run.pending = n_present
            if counted and run.entries is None and [
                    r.targets for r in run.records].count(None) == run.n:
                self.counters.received += run.n
                flow.in_flight += run.n
                for stream in present:
                    stream.offer(run)
            else:
                entries = run.ledger.itemise(run)
                self.counters.received += len(entries)
                flow.in_flight += len(entries)
                self._broadcast_entries(entries, present, absent)
        flow.handed(present)  # before waking: it tells the busy from the waiting
        for stream in present:
            stream.wake()

    def _broadcast_entries(self, entries: list[Entry], present: list[SharedStream],
                           absent: dict[str, str] | None) -> None:
        """Hand out an itemised slice: targeted messages (replayed dead letters, remembered
        holds) alone, and a failure record per message for the watchers that are missing."""
        cohort = self.cohort
        resolution = self._resolution
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
                    resolution.owe(entry, absent)
                if not n_present:
                    resolution.resolved(entry)
            else:  # a replayed dead letter or a remembered hold: what precedes goes first
                if run < i:
                    self._offer(present, entries[run:i])
                run = i + 1
                entry.targets = cohort if targets is None else targets
                if owed:
                    resolution.remembered_hold(entry, owed)
                else:
                    resolution.deliver(entry, entry.targets)
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
        slices = self.ledger.admit(items, self._size, counted)
        self._targets.schedule()
        if not slices:
            return
        woken: list[SharedStream] = []
        single: dict[str, Shares | None] = {}  # the slice of a watcher's one share (None: several)
        flow = self._flow
        for run in slices:
            if counted and run.entries is None and [
                    r.targets for r in run.records].count(None) == run.n:
                self._route_counted(run, index, everyone, woken, single)
            else:
                entries = run.ledger.itemise(run)
                self.counters.received += len(entries)
                flow.in_flight += len(entries)
                self._route_entries(entries, index, everyone, absent, woken)
        flow.handed(chain(everyone, woken))  # before waking, as in hand_out
        for stream in everyone:
            stream.wake()
        if single:
            queued = self._give(single)
            if queued:
                flow.handed(queued)
                woken += queued
        for stream in woken:
            stream.offered()  # a batch runner waiting for them handles them now

    def _give(self, single: dict[str, Shares | None]) -> list[SharedStream]:
        """Each watcher routed one share of this batch: its runner calls it now, past
        the queue, when it is :attr:`ready` (core/inline.py), or it is queued; the
        streams it was queued for, to check for lag and wake."""
        ready = self.ready
        queued: list[SharedStream] = []
        for name, shares in single.items():
            if shares is None:
                continue  # several: queued as they were routed
            caller = ready.get(name)
            if caller is None or not caller.call_share(shares, shares.routed[name][1]):
                stream = self._streams[name]
                stream.offer(shares.open(name))
                queued.append(stream)
        return queued

    def _route_counted(self, run: Slice, index: RoutingIndex, everyone: list[SharedStream],
                       woken: list[SharedStream], single: dict[str, Shares | None]) -> None:
        """A counted slice's shares: a watcher's first share of the batch waits in
        ``single`` (given past the queue when it stays the only one), a second queues
        both, in order."""
        n = run.n
        self.counters.received += n
        self._flow.in_flight += n
        run.targets = self.routes.everyone
        shares, unrouted = self.routes.share(run, index)
        run.shares = shares
        run.pending = len(everyone) + len(shares.routed)
        if not everyone:
            self.counters.unrouted += unrouted
        if not run.pending:
            self._resolution.settle_slice(run)
            return
        for stream in everyone:
            stream.offer(run)
        streams = self._streams
        for name in shares.routed:
            first = single.setdefault(name, shares)
            if first is shares:
                continue
            stream = streams[name]
            if first is not None:
                stream.offer(first.open(name))
                single[name] = None
                woken.append(stream)
            stream.offer(shares.open(name))

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
        resolution = self._resolution
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
                    resolution.remembered_hold(entry, owed)
                else:
                    assert named is not None
                    entry.targets = named
                    resolution.deliver(entry, named)
                woken.extend(s for s in map(self._streams.get, entry.targets) if s is not None)
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
                resolution.owe(entry, failed)
            entry.pending = pending
            if n_everyone:
                common.append(entry)
            if not pending:
                resolution.resolved(entry)
        self._done_with_held(held, entries)
        self._offer_routed(everyone, common, chunks, woken)

    @staticmethod
    def _done_with_held(held: dict[int, frozenset[str]] | None, entries: list[Entry]) -> None:
        if held and entries and max(held) < entries[-1].offset:
            held.clear()  # offsets never read (compacted away): stop itemising for them

    def _offer_routed(self, everyone: list[SharedStream], common: list[Entry],
                      chunks: dict[str, list[Entry]], woken: list[SharedStream]) -> None:
        if common:
            self._offer(everyone, common)
        streams = self._streams
        for name, chunk in chunks.items():
            stream = streams[name]
            stream.offer(chunk)
            woken.append(stream)

    @staticmethod
    def _offer(present: list[SharedStream], chunk: list[Entry]) -> None:
        for stream in present:
            stream.offer(chunk)

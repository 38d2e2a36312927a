"""A group's resolution side: each watcher's outcome of a message, and what settles it.

A watcher's stream reports every outcome here (ack, reject, fail; a batch watcher's
``ack_many`` and ``ack_range``); the last outcome of a delivery round settles the entry
at once (terminal, held or dead-lettered: :mod:`sharedstream.core.group` lists when). A
held entry is handed out again after the backoff of its round (sooner when a failure of
the round said when to try again: ``InfrastructureError.retry_after``), or at once on an
operator's ``retry_now``. Entries every watcher acked cleanly in their first round
settle in bulk (once per batch: counters, ``in_flight``, the ledger), and a counted
slice in one step when the last watcher reaches its end.

:class:`Resolution` is a part of the group (:mod:`sharedstream.core.group`) with its own
state (the held entries' timers). It also starts every delivery round that is not a
batch's hand-out (:meth:`Resolution.deliver`: a targeted message, a remembered hold, a
redelivery): a round is what outcomes settle. It reads the group's ``Lifecycle``,
counts out of the flow control's ``in_flight`` and calls the group back only through
``fail_group`` (the adapter refused a dead letter): no import of the group's. The group
binds its outcome methods for its streams, so a stream's ``ack_many`` is one call.

Invariants: an entry's outcome counts only while it is PENDING (a late outcome, after
its partition ended or the round settled, is ignored); nothing settles once the group
is CLOSING or FAILED: what resolves then stays uncommitted and is read again by the
next consumer. Failure window: attempt counts and acks of earlier rounds live only in
the process; if it dies the held entries are read again, and go as retries to the
watchers whose holds were written (core/holds.py: every hold a watcher may have moved
past is), as crash redeliveries to the others.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any, TypeVar

from sharedstream import tracing
from sharedstream.core.backoff import retry_delay
from sharedstream.core.batchtake import Counted
from sharedstream.core.contract import SharedStreamProducer
from sharedstream.core.counters import GroupCounters
from sharedstream.core.flowcontrol import FlowControl
from sharedstream.core.groupstate import CLOSING, FAILED, PAUSED, POLLING, Lifecycle
from sharedstream.core.holds import HoldJournal, HoldKey
from sharedstream.core.ledger import Entry, Ledger, Slice, State
from sharedstream.core.message import KafkaMessage
from sharedstream.core.shares import Share, Shares
from sharedstream.core.stream import SharedStream
from sharedstream.core.streamconfig import (
    ABSENT,
    HELD_BEFORE,
    Clock,
    ManagerSettings,
    TimerHandle,
)
from sharedstream.core.targets import CommitTargets

_T = TypeVar("_T")
# The group's logger: its lines are the group's (docs/architecture.md names them).
log = logging.getLogger("sharedstream.core.group")

# A held message is never handed out again sooner than this, whatever the backoff says.
MIN_RETRY_S = 0.05
PENDING = State.PENDING
NOT_IN_COHORT = "not in the cohort"


class Resolution:
    """Outcomes, settlement and delivery rounds of one group's entries (a part of
    ``Group``)."""

    def __init__(self, key: Hashable, cohort: frozenset[str],
                 producer: SharedStreamProducer[Any], settings: ManagerSettings,
                 clock: Clock, ledger: Ledger, counters: GroupCounters,
                 streams: Mapping[str, SharedStream],
                 holds: HoldJournal | None, life: Lifecycle, flow: FlowControl,
                 targets: CommitTargets, fail_group: Callable[[BaseException], None]) -> None:
        self.key = key
        self.cohort = cohort
        self.producer = producer
        self.settings = settings
        self.clock = clock
        self.ledger = ledger
        self.counters = counters
        self.streams = streams  # the group's present streams, read only here
        # The process's journal of holds that must survive a crash (None: not kept).
        self.holds = holds
        self._life = life
        self._flow = flow
        self._targets = targets
        self._fail_group = fail_group
        self._resume_at = settings.max_in_flight // 2
        # Each held entry's retry: when (clock time, for /status) and its timer (to
        # cancel, for an operator's retry now).
        self._held: dict[Entry, tuple[float, TimerHandle]] = {}

    def ack(self, entry: Entry, watcher: str) -> None:
        if entry.state is not PENDING:
            return
        if entry.rounds > 1 and self.holds is not None:  # a retry handled: its hold ends
            self.holds.closed(_hold_key(entry, watcher))
        if tracing.tracer is not None:  # each outcome has its watch span (tracing room)
            tracing.acked(entry.payload, watcher)
        entry.pending -= 1
        if not entry.pending:
            self.resolved(entry)

    def ack_many(self, entries: list[Entry], watcher: str) -> None:
        """``ack`` for every entry of a batch (one call per watcher per batch).

        The entries it resolves cleanly (every watcher of the cohort acked in their
        first round) settle in bulk: counters, ``in_flight`` and the ledger's
        partitions once per batch, not once per message. The others go through
        ``_resolved`` one by one, in order.
        """
        if tracing.tracer is not None:
            for entry in entries:
                if entry.state is PENDING:
                    tracing.acked(entry.payload, watcher)
        cohort = self.cohort
        clean: list[Entry] = []
        holds = self.holds
        for entry in entries:
            if entry.state is PENDING:
                if entry.rounds > 1 and holds is not None:
                    holds.closed(_hold_key(entry, watcher))
                entry.pending -= 1
                if entry.pending:
                    continue
                if entry.failed is None and entry.rejected is None and (
                        entry.acked_before is None and entry.round_targets is cohort):
                    clean.append(entry)
                else:
                    self.resolved(entry)
        if clean:
            self._settled_clean(clean)

    def ack_range(self, run: Counted, start: int, stop: int, watcher: str) -> None:
        """A batch watcher resolved ``[start, stop)`` of a counted slice (or of its share of
        one, in a routed group) cleanly.

        In order (the watcher's acks so far cover ``[0, start)``) it is one count: the
        slice's ``pending`` drops when the watcher reaches its end, and the slice settles
        when no watcher owes it. Out of order (an earlier part still waits for its unit
        of work), or once the slice is itemised, each message is acked on its own.
        """
        if isinstance(run, Share):
            share, whole = run, run.run
            if whole.entries is None:
                if whole.state is not PENDING:
                    return  # dropped: its partition ended
                if share.done == start:
                    share.done = stop
                    if stop == share.n:
                        self.share_done(whole)
                    return
        elif run.entries is None:
            if run.state is not PENDING:
                return  # dropped: its partition ended
            progress = run.progress
            done = 0 if progress is None else progress.get(watcher, 0)
            if done == start:
                if stop < run.n:
                    if progress is None:
                        progress = run.progress = {}
                    progress[watcher] = stop
                    return
                if progress is not None:
                    progress.pop(watcher, None)
                run.pending -= 1
                if not run.pending:
                    self.settle_slice(run)
                return
        self.ack_many(self.itemise(run)[start:stop], watcher)

    def share_done(self, run: Slice) -> None:
        """A watcher with a match resolved all of its share of counted slice ``run``
        cleanly (not itemised, not dropped): it owes the slice nothing now, and the slice
        settles when no watcher owes it."""
        run.pending -= 1
        if not run.pending:
            self.settle_slice(run)

    def itemise(self, run: Counted) -> list[Entry]:
        """The entries of a slice (or of a watcher's share of one), aligned with it (a
        counted slice gets them now).

        A counted slice's entries that every watcher still owing it had resolved already
        (each acked a prefix of it, or of its share: ``progress``, ``done``) are owed by
        nobody, and so is a routed message no watcher wanted: they settle here, as the
        clean acknowledgement they had (counters, ``in_flight``, the ledger, the resume
        mark). Left pending, nothing would ever finish them: the commit target would stop
        on the first of them. Itemise through here, not the partition ledger, for that.
        """
        if isinstance(run, Share):
            self.itemise(run.run)
            entries = run.chunk
            assert entries is not None
            return entries
        counted = run.entries is None and run.state is PENDING
        chunk = run.ledger.itemise(run)
        if counted and run.shares is not None:  # routed: anywhere, each target counted
            owed_by_none = [entry for entry in chunk if not entry.pending]
            if owed_by_none and self._life.settling:
                acked = self.counters.acked
                for entry in owed_by_none:
                    acked.update(entry.targets)
                self._settle_clean(len(owed_by_none), self.ledger.finish_many, owed_by_none,
                                   clean=False)
        elif counted:
            resolved = 0  # pending falls to 0 only on a prefix: progress covers prefixes
            while resolved < len(chunk) and not chunk[resolved].pending:
                resolved += 1
            if resolved:
                self._settled_clean(chunk[:resolved])
        return chunk

    def settle_slice(self, run: Slice) -> None:
        """Every watcher acked a counted slice cleanly: settle it in one step. In a routed
        group each watcher's acknowledgements are counted, once per slice: ``clean``
        counts the messages the whole cohort acked."""
        if run.shares is None:
            self._settle_clean(run.n, self.ledger.settle, run)
            return
        if not self._life.settling:
            return  # as in resolved
        acked = self.counters.acked
        for name in run.targets:
            acked[name] += run.n
        shares = run.shares
        assert isinstance(shares, Shares)
        if shares.several:
            for name, (positions, _) in shares.routed.items():
                acked[name] += len(positions)
        else:  # one each (10,000 watchers each wanting 1/10,000): counted in C
            acked.update(shares.routed.keys())
        self._settle_clean(run.n, self.ledger.settle, run, clean=False)

    def _settled_clean(self, entries: list[Entry]) -> None:
        """Settle entries every watcher acked cleanly, in one go (see ``ack_many``)."""
        self._settle_clean(len(entries), self.ledger.finish_many, entries)

    def _settle_clean(self, n: int, settle: Callable[[_T], None], what: _T, *,
                      clean: bool = True) -> None:
        """Count ``n`` clean settlements (``clean``: each acked by the whole cohort), let
        the ledger ``settle`` them, then publish and resume where in flight crosses the
        resume mark (once per batch, not per entry)."""
        if not self._life.settling:
            return  # as in resolved: left uncommitted, read again by the next consumer
        counters = self.counters
        if clean:
            counters.clean += n
        counters.settled += n
        flow = self._flow
        flow.in_flight -= n
        settle(what)
        if not flow.in_flight:
            self._targets.drained()
        elif self._targets.handle is None:
            self._targets.schedule()
        half = self._resume_at
        if flow.in_flight <= half < flow.in_flight + n and flow.flow is PAUSED:
            flow.maybe_resume()  # only where in flight crosses the resume mark

    def reject(self, entry: Entry, watcher: str, reason: str) -> None:
        if entry.state is not PENDING:
            return
        if tracing.tracer is not None:  # before the dead letter, its span's parent
            tracing.rejected(entry.payload, watcher, reason)
        if entry.rejected is None:
            entry.rejected = {}
        entry.rejected[watcher] = reason
        self.owe(entry, (watcher,))
        entry.pending -= 1
        if not entry.pending:
            self.resolved(entry)

    def fail(self, entry: Entry, watcher: str, why: str, *, counts: bool,
             retry_after: float | None = None) -> None:
        """Fail one watcher for one message; ``counts`` towards ``max_attempts`` or not;
        ``retry_after``: the seconds after which it may succeed (the round's earliest
        such moment brings its retry forward)."""
        if entry.state is not PENDING:
            return
        if counts:
            if entry.attempts is None:
                entry.attempts = {}
            attempts = entry.attempts[watcher] = entry.attempts.get(watcher, 0) + 1
            if attempts >= self.settings.max_attempts:
                self.reject(entry, watcher, f"max attempts: {why}")
                return
        if tracing.tracer is not None:
            tracing.failed(entry.payload, watcher, why)
        if retry_after is not None:
            at = self.clock.now() + retry_after
            entry.retry_at = at if entry.retry_at is None else min(entry.retry_at, at)
        if entry.failed is None:
            entry.failed = {}
        entry.failed[watcher] = why
        self.owe(entry, (watcher,))
        entry.pending -= 1
        if not entry.pending:
            self.resolved(entry)

    def resolved(self, entry: Entry) -> None:
        """The last watcher of a delivery round resolved it: settle it in the ledger now.

        Not once the adapter is closing: what resolves then stays uncommitted and is
        read again by the next consumer.
        """
        life = self._life.state
        if life is CLOSING or life is FAILED:
            return
        failed, rejected, before = entry.failed, entry.rejected, entry.acked_before
        counters = self.counters
        flow = self._flow
        if failed is None and rejected is None and before is None and (
                entry.round_targets is self.cohort):
            counters.clean += 1
            counters.settled += 1
            flow.in_flight -= 1
            self.ledger.finish(entry)
        else:
            acked = entry.round_targets
            if failed:
                acked = acked - failed.keys()
            if rejected:
                acked = acked - rejected.keys()
            if before:
                acked = acked | before
            if failed:
                counters.failed.update(failed.keys())
                entry.acked_before = acked
                self.ledger.hold(entry)
                self._hold(entry)
                return
            counters.acked.update(acked)
            counters.settled += 1
            flow.in_flight -= 1
            if rejected:
                counters.rejected.update(rejected.keys())
                entry.ledger.deliver(entry)
                try:
                    self.producer.dead_letter(entry.payload, dict(rejected),
                                              lambda: self._dead_lettered(entry))
                except Exception as exc:
                    log.exception("group %r: the adapter refused a dead letter; evicting the "
                                  "group", self.key)
                    self._fail_group(exc)
                    return
            else:
                self.ledger.finish(entry)
        if not flow.in_flight:
            self._targets.drained()
        elif self._targets.handle is None:
            self._targets.schedule()
        # In flight falls one at a time: check the resume mark only where it is crossed.
        if flow.in_flight == self._resume_at and flow.flow is PAUSED:
            flow.maybe_resume()

    def _hold(self, entry: Entry) -> None:
        """Hand a held entry out again after the backoff of its delivery round, or at
        the round's ``retry_at`` when that is sooner."""
        now, at, entry.retry_at = self.clock.now(), entry.retry_at, None
        if self._life.state is not POLLING:
            return
        hint = None if at is None else at - now
        delay = max(retry_delay(self.settings.backoff(entry.rounds), hint), MIN_RETRY_S)

        def due() -> None:
            self._held.pop(entry, None)
            self._redeliver(entry)

        when = now + delay
        self._held[entry] = when, self.clock.call_at(when, due)

    def retry_now(self, topic: str, partition: int, offset: int) -> bool:
        """Hand a held message out again at once, as if its backoff had ended (an
        operator's ``held retry``). False when this group does not hold it between
        attempts: resolved, in an attempt, or on a partition it no longer owns."""
        ledger = self.ledger.partitions.get((topic, partition))
        entry = None if ledger is None else ledger.get(offset, itemise=False)  # held: itemised
        held = None if entry is None else self._held.pop(entry, None)
        if entry is None or held is None:
            return False
        held[1].cancel()
        self._redeliver(entry)
        return True

    def owe(self, entry: Entry, watchers: Iterable[str]) -> None:
        """These watchers failed or rejected the entry and may move past it: journal the
        hold, so that it is written before any later unit of work of theirs commits
        (:mod:`sharedstream.core.holds`)."""
        holds = self.holds
        if holds is not None:
            topic, partition = entry.ledger.key
            for watcher in watchers:
                holds.opened(HoldKey(watcher, topic, partition, entry.offset))

    def _dead_lettered(self, entry: Entry) -> None:
        if entry.rejected and self.holds is not None:  # durable now: the holds end
            self.holds.finished(entry.rejected, *entry.ledger.key, entry.offset)
        if self.ledger.delivered(entry):
            self._targets.schedule()

    def _redeliver(self, entry: Entry) -> None:
        """A held entry's retry time came: hand it to the watchers that still owe it."""
        if self._life.state is not POLLING or not self.ledger.release(entry):
            return
        entry.rounds += 1
        self.counters.redelivered += 1
        if isinstance(entry.raw, KafkaMessage):  # the filter can tell a retry (catching_up)
            entry.raw = entry.raw._replace(delivery=entry.rounds)
        owed = entry.targets - (entry.acked_before or frozenset())
        if entry.rejected:
            owed = owed - entry.rejected.keys()
        self.deliver(entry, owed)
        for name in owed:
            stream = self.streams.get(name)
            if stream is not None:
                stream.wake()


    def deliver(self, entry: Entry, targets: frozenset[str],
                failed: dict[str, str] | None = None) -> None:
        """Start a delivery round of one entry (slow path: a targeted message or a
        redelivery round; ``failed``: the watchers failed for it already, outside
        ``targets``)."""
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
            self.resolved(entry)

    def remembered_hold(self, entry: Entry, owed: frozenset[str]) -> None:
        """A message some watchers still owed when the partition was last owned (the
        process died, or the partition moved: core/holds.py): it goes to the others of its
        targets as any message read again, and to those watchers as a retry after its
        backoff, marked ``catching_up``, as if they had just failed it (no attempt)."""
        holds = self.holds
        if holds is not None:
            topic, partition = entry.ledger.key
            for watcher in owed:
                holds.loaded(HoldKey(watcher, topic, partition, entry.offset))
        self.deliver(entry, entry.targets - owed, dict.fromkeys(owed, HELD_BEFORE))

    def due(self, entry: Entry) -> float | None:
        """When a held entry is handed out again (clock time; None: not waiting)."""
        held = self._held.get(entry)
        return None if held is None else held[0]

    def cancel_timers(self) -> None:
        """The group stops or fails: no held entry is handed out again."""
        for _, handle in self._held.values():
            handle.cancel()
        self._held.clear()


def _hold_key(entry: Entry, watcher: str) -> HoldKey:
    topic, partition = entry.ledger.key
    return HoldKey(watcher, topic, partition, entry.offset)

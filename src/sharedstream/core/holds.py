"""Holds that must survive a crash: which watcher has not durably handled which offset.

Why. A watcher that fails a message (its filter raised, it timed out, it was
missing) or rejects one (its dead letter not yet acknowledged) moves on to the next
messages of the partition; their units of work may advance its watermark. If the
process dies then, the broker hands the held message out again from the committed
offset, and without a record of the hold it looks like a crash redelivery: a copy of a
message the watcher already handled, which the documented watermark check skips. The
message would be lost. So the hold is written to the database in the same transaction
as (or before) any later unit of work of the same watcher: after a restart the message
goes again to exactly the watchers that still owe it, as a retry (``catching_up``).

The :class:`HoldJournal` is the in-memory side, shared by the groups of a process and
its unit-of-work sink, all on the event loop:

* a group calls :meth:`HoldJournal.opened` when a watcher fails or rejects a message,
  :meth:`HoldJournal.closed` when that watcher acks it on a retry (its events are
  durable), and :meth:`HoldJournal.finished` when the message is terminal for everyone;
* the sink calls :meth:`HoldJournal.take` as it forms a transaction: the holds not yet
  written of the watchers whose windows the transaction commits, and the rows of holds
  closed since (to delete); then :meth:`HoldJournal.done` with the outcome.

States of a hold (:class:`HoldState`)::

    UNRECORDED -> RECORDING   take(): a transaction writes it
    RECORDING  -> RECORDED    done(ok=True)
    RECORDING  -> UNRECORDED  done(ok=False): the transaction rolled back
    any        -> (gone)      closed()/finished(); a written row is queued for deletion

Invariant: when a transaction commits a window of watcher W on partition P, every hold
of W on P opened before the window was submitted is RECORDED or RECORDING in that same
transaction. A hold opens before the watcher can move past the message (the group
reports a failure or rejection before the stream hands out the next message), and the
sink takes from the journal on the loop as it forms the transaction, after every window
in it was submitted.

Cost: O(holds). Nothing is written for a message every watcher handles cleanly; a hold
closed before any later unit of work of its watcher commits is never written at all.

Failure windows:

* dies before a hold's row commits: no later unit of work of that watcher on that
  partition committed either (they share the transaction), so nothing moved its
  watermark past the message; the crash redelivery reaches it as before.
* dies after a hold closed but before its row is deleted: the row is stale; after a
  restart the message is handed to that watcher again as a retry. Its events are not
  written twice (their key), and a forward-only watermark does not move back. This is
  the one case where a watcher sees a message it handled, marked ``catching_up``.
* rows below the committed offset are stale by construction and deleted when their
  partition is next assigned (:class:`HoldStore`).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple, Protocol


class HoldKey(NamedTuple):
    """One watcher's hold on one offset, by where the message was read."""

    watcher: str
    topic: str
    partition: int
    offset: int


class HoldState(enum.Enum):
    UNRECORDED = "unrecorded"
    RECORDING = "recording"
    RECORDED = "recorded"


UNRECORDED, RECORDING, RECORDED = HoldState.UNRECORDED, HoldState.RECORDING, HoldState.RECORDED


class Taken(NamedTuple):
    """What one transaction writes: holds to insert, rows to delete."""

    record: tuple[HoldKey, ...]
    delete: tuple[HoldKey, ...]

    def __bool__(self) -> bool:
        return bool(self.record or self.delete)


NOTHING = Taken((), ())


class HoldStore(Protocol):
    """Where holds are kept (the database: ``uow/holdstore.py``).

    ``load`` is called when partitions are assigned, with ``(topic, partition, committed
    offset or None)``: the remembered holds of this consumer group's watchers at or above
    the committed offset, per partition. It may delete the rows below it (stale). Rows
    are written by the unit-of-work sink, inside its transactions.
    """

    def load(self, consumer_group: str, partitions: Sequence[tuple[str, int, int | None]]
             ) -> dict[tuple[str, int], dict[int, frozenset[str]]]: ...


class HoldJournal:
    """Open holds of one process's watchers, and what the next transaction must write."""

    def __init__(self, consumer_group_of: Mapping[str, str] | None = None) -> None:
        # watcher -> the Kafka consumer group its holds are kept under (rows name it).
        self.consumer_group_of: Mapping[str, str] = consumer_group_of or {}
        self._state: dict[HoldKey, HoldState] = {}
        # watcher -> its holds not written yet (the common lookup: is there any?)
        self._unrecorded: dict[str, set[HoldKey]] = {}
        self._delete: set[HoldKey] = set()
        # RECORDING holds whose partition left meanwhile: dropped once written, queued
        # again if their transaction rolls back (a window of theirs may still commit).
        self._forgotten: set[HoldKey] = set()
        self.recorded_total = 0
        self.deleted_total = 0

    def __len__(self) -> int:
        return len(self._state)

    def opened(self, key: HoldKey) -> None:
        """A watcher failed or rejected a message: it owes it until it acks it."""
        if key in self._state:
            return
        self._delete.discard(key)
        self._state[key] = UNRECORDED
        self._unrecorded.setdefault(key.watcher, set()).add(key)

    def loaded(self, key: HoldKey) -> None:
        """A hold remembered in the store (a partition start): its row exists. A hold this
        process still tracks (not written yet, or being written) keeps its state."""
        self._delete.discard(key)
        self._state.setdefault(key, RECORDED)

    def closed(self, key: HoldKey) -> None:
        """The watcher handled the message durably (acked a retry): the hold ends."""
        state = self._state.pop(key, None)
        if state is None:
            return
        if state is UNRECORDED:
            self._forget_unrecorded(key)
        else:
            self._delete.add(key)

    def finished(self, watchers: Iterable[str], topic: str, partition: int,
                 offset: int) -> None:
        """The message is terminal: every hold of these watchers on it ends."""
        for watcher in watchers:
            self.closed(HoldKey(watcher, topic, partition, offset))

    def take(self, watchers: Iterable[str]) -> Taken:
        """The holds of ``watchers`` not written yet, and the rows to delete, for the
        transaction being formed now (the caller reports :meth:`done`)."""
        record: list[HoldKey] = []
        if self._unrecorded:
            for watcher in watchers:
                keys = self._unrecorded.pop(watcher, None)
                if keys:
                    for key in keys:
                        self._state[key] = RECORDING
                    record.extend(keys)
        if not record and not self._delete:
            return NOTHING
        delete = tuple(self._delete)
        self._delete.clear()
        return Taken(tuple(record), delete)

    def done(self, taken: Taken, ok: bool) -> None:
        """The transaction that wrote ``taken`` committed (``ok``) or rolled back."""
        for key in taken.record:
            state = self._state.get(key)
            if key in self._forgotten:
                self._forgotten.discard(key)
                if ok:
                    del self._state[key]  # its row stays, for the partition's next owner
                    continue
            if state is RECORDING:
                if ok:
                    self._state[key] = RECORDED
                else:
                    self._state[key] = UNRECORDED
                    self._unrecorded.setdefault(key.watcher, set()).add(key)
            elif state is None and ok:
                self._delete.add(key)  # closed while its row was being written
        if ok:
            self.recorded_total += len(taken.record)
            self.deleted_total += len(taken.delete)
        else:
            self._delete.update(k for k in taken.delete if k not in self._state)

    def forget(self, topic: str, partition: int) -> None:
        """The partition left this process: its written holds stay for the next owner.
        Holds not written yet stay queued, and holds being written stay tracked until
        their transaction ends: a window of the same watcher may still be in the sink,
        and must not commit without them."""
        for key, state in list(self._state.items()):
            if key.topic != topic or key.partition != partition:
                continue
            if state is RECORDED:
                del self._state[key]
            elif state is RECORDING:
                self._forgotten.add(key)

    def open_on(self, topic: str, partition: int) -> dict[int, set[str]]:
        """Offset -> watchers of the holds on this partition that this process tracks
        but the store may not have yet (not written, or being written): a partition that
        comes back to this process must know them as the store would. O(holds)."""
        found: dict[int, set[str]] = {}
        for key, state in self._state.items():
            if state is not RECORDED and key.topic == topic and key.partition == partition:
                found.setdefault(key.offset, set()).add(key.watcher)
        return found

    def _forget_unrecorded(self, key: HoldKey) -> None:
        keys = self._unrecorded.get(key.watcher)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._unrecorded[key.watcher]


__all__ = ["NOTHING", "HoldJournal", "HoldKey", "HoldState", "HoldStore", "Taken"]

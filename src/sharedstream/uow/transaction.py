"""One unit-of-work transaction: what a batch of windows writes, in which order.

A *window* is one watcher's outcome for one message (or for one batch call): the events
it yielded and the state it staged. :class:`~sharedstream.uow.sink.DatabaseWorkSink`
gathers windows into batches; :class:`BatchTransaction` writes one batch in ONE
transaction, on the sink's writer thread, on a connection of its own
(:mod:`~sharedstream.uow.writerconn`).

What goes in, in this order:

1. **Holds** the batch's watchers opened before moving past a message
   (:mod:`sharedstream.core.holds`, rows by ``statestore.holds``): in the transaction
   that makes a watcher's progress past the held message durable, so never one
   without the other.
2. **State writes** the windows staged (``advance``, ``set``, ``delete``, clears), folded
   in window order into one :class:`~sharedstream.statestore.staging.StagedWrites`
   (:mod:`~sharedstream.uow.batchmerge`) and applied by the store
   (:meth:`~sharedstream.statestore.uow.UnitOfWork.apply`): an ``advance`` is re-checked
   under a row lock, so a watermark never moves backwards.
3. **Events** of every window as ``asset_event`` rows (:mod:`~sharedstream.uow.windowrows`),
   last: the statement locks the event sequence until the commit, so event ids are in
   commit order (``delivery`` reads them in that order). One conflict-skipping insert,
   or ``COPY`` for a large batch on PostgreSQL (:mod:`~sharedstream.uow.eventcopy`).
4. **Commit.** Then, on this thread, the store's post-commit cleanup (payload objects of
   deleted keys, remembered watermarks: ``UnitOfWork.committed``); then, on the event
   loop (the sink), the windows are confirmed, the manager acknowledges them, and only
   then may the ledger's commit target, and so Kafka's committed offset, pass them.

Not in it: rejections. A rejected message is made durable on its own (its dead letter
acknowledged by the broker, or a ``rejected_message`` row: ``uow/rejections.py``) before
the offset moves past it; a window rejected for its data (below) commits nothing.

Invariants:

1. A window's events and its state commit together or not at all; a window is never
   split across transactions (the batch cap counts whole windows).
2. Windows apply in submission order: a later window's state write lands after an
   earlier one's, within a batch (the fold) and across batches (one writer thread).
3. Nothing is confirmed before its transaction committed, so Kafka never commits past
   a message whose events or state are not durable.
4. Writing a batch again is harmless: the event key (watcher, topic id, partition,
   offset, index) makes a stored event's re-insert a no-op, and re-applied state lands
   on the value it already has.

What a crash between the steps leaves behind:

* before the commit (steps 1 to 3, or during ``COMMIT``): the transaction rolls back;
  nothing of the batch is stored, nothing was confirmed, and Kafka redelivers every
  message of it. Payload objects written for set keys are orphans that no row
  references (the key's next write overwrites them). A connection lost during
  ``COMMIT`` leaves the outcome unknown; the retry is safe by invariant 4.
* after the commit, before the post-commit cleanup: orphan payload objects
  (``state-store orphans --delete``) and no remembered watermarks (the next unit reads
  them again).
* after the commit, before the windows are confirmed, or before Kafka committed: events,
  state and holds are stored; the messages are redelivered, the filters run again and
  re-insert nothing (invariant 4); a watcher that skips "seen" messages by its
  ``advance``-d watermark skips them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy.engine import Connection

from sharedstream import tracing
from sharedstream.core.holds import NOTHING, HoldJournal, Taken
from sharedstream.core.window import Window
from sharedstream.statestore.events import EVENT_COLUMNS, insert_event_rows
from sharedstream.statestore.holds import write_holds
from sharedstream.statestore.store import StateStore
from sharedstream.uow.batchmerge import fold_staged
from sharedstream.uow.eventcopy import COPY_MIN_ROWS, can_copy, copy_events, is_duplicate_key
from sharedstream.uow.eventrows import CoordinatesOf
from sharedstream.uow.windowrows import window_event_rows
from sharedstream.uow.writerconn import WriterConnection


class Queued(NamedTuple):
    """A window waiting in the sink for its transaction, its payloads encoded."""

    window: Window
    asset_id: int
    texts: list[str]
    since: float  # loop time of submit
    watches: tracing.Watches | None  # its sharedstream.watch spans while tracing is on


class BatchTransaction:
    """Writes batches of windows, one transaction each (see the module docstring).

    Used on one thread only (the sink's writer): it holds that thread's connection and
    remembers whether the last batch met stored events (then the next ones insert
    rather than ``COPY`` until a batch does not).
    """

    def __init__(self, store: StateStore, *, coordinates: CoordinatesOf,
                 clock: Callable[[], datetime], holds: HoldJournal | None) -> None:
        self._store = store
        self._coordinates = coordinates
        self._clock = clock
        self._holds = holds
        self._connection = WriterConnection(store.engine)
        self._copy = can_copy(store.engine)  # large batches' events by COPY (eventcopy)
        self._duplicates = False  # the last batch met stored events: no COPY until one does not

    def write(self, batch: Sequence[Queued], taken: Taken = NOTHING) -> int:
        """One transaction: the holds ``taken`` for it, the batch's folded state writes,
        then its events; commit. Returns how many events were new."""
        created_at = self._clock()
        rows: list[tuple[Any, ...]] = []
        units = []
        # Tracing on: every row of the batch has the column (NULL where a window has none).
        traced = any(q.watches is not None for q in batch)
        for window, asset_id, texts, _, watches in batch:
            if texts:
                made = window_event_rows(asset_id, window, self._coordinates, texts,
                                         created_at)
                if traced:
                    contexts = ([None] * len(made) if watches is None
                                else tracing.stored_contexts(watches, len(made)))
                    made = [(*row, context)
                            for row, context in zip(made, contexts, strict=True)]
                rows += made
            if window.staged:
                units.append(window.staged)
        columns = (*EVENT_COLUMNS, "trace_context") if traced else EVENT_COLUMNS
        uow = self._store.unit_of_work()
        uow.staged = fold_staged(units)
        copy = self._copy and not self._duplicates and len(rows) >= COPY_MIN_ROWS

        holds = self._holds

        def work(connection: Connection) -> int:
            if taken and holds is not None:
                write_holds(connection, taken, holds.consumer_group_of)
            uow.apply(connection)
            # Last: it locks the event sequence until the commit (commit-ordered ids).
            return (copy_events if copy else insert_event_rows)(connection, columns, rows)

        try:
            try:
                written = self._connection.run(
                    work, one_statement=not (uow.staged or copy or taken))
            except Exception as exc:
                if not (copy and is_duplicate_key(exc)):
                    raise
                # Redelivered events already stored: this batch, and the ones after it
                # until a batch holds none, skip them with the one statement.
                self._duplicates = True
                copy = False
                written = self._connection.run(work, one_statement=not (uow.staged or taken))
        except BaseException:
            uow.discard()
            raise
        if not copy and written == len(rows):
            self._duplicates = False
        uow.committed()
        return written

    def close(self) -> None:
        """Give the writer's connection back (on the writer thread, after its last batch)."""
        self._connection.close()

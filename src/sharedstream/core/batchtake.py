"""A batch watcher's side of its stream: what ``take_part`` cuts from the queue.

A stream's queue holds chunks (:data:`Chunk`): lists of entries, or, for a batch
watcher, counted slices (:class:`~sharedstream.core.ledger.Slice`, no entry per message)
or, for one with a match in a routed group, its share of one
(:class:`~sharedstream.core.shares.Share`), taken the same way.
``take_part`` pops up to ``limit`` messages at once, whole chunks where they fit, and
hands out parts of counted slices as :class:`Pieces`, which the batch runner
acknowledges with one call per slice (``ack_range``). It never mixes the two kinds, and
a message handed out again (a later delivery round, queued as a chunk of its own) comes
alone, so a batch never mixes a retry in. Cost: O(chunks taken), not O(messages),
unless the group dropped entries while some of the queue waited (``_stale``: each
entry taken is checked once, until the queue empties).

:class:`BatchTaking` is a base of :class:`~sharedstream.core.stream.SharedStream`,
which holds the queue fields it declares; the per-message path (``__anext__``) stays
in the stream. It knows the group only as a :class:`TakeOwner`, so this module imports
neither the group's nor the stream's.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Protocol

from sharedstream.core.ledger import Entry, State
from sharedstream.core.shares import Counted, Piece, Pieces, Share

PENDING = State.PENDING
# Messages handed out in a row before the stream lets the loop run other work.
HANDOUT_RUN = 128


Chunk = list[Entry] | Counted


class TakeOwner(Protocol):
    """What taking calls back into: the stream's group."""

    @property
    def paused(self) -> bool:
        """True while the group fetches nothing new (read on every hand-out: cheap)."""

    @property
    def low_queue(self) -> int:
        """The queue length at or below which a paused group may resume."""

    def itemise(self, run: Counted) -> list[Entry]:
        """The entries of a slice or share, aligned with it (built now for a counted one)."""

    def maybe_resume(self) -> None: ...


class BatchTaking:
    """``take`` and ``take_part`` of a stream (a base of ``SharedStream``)."""

    __slots__ = ("_interrupted", "_pos", "_queue", "_queued", "_run", "_seq", "_stale",
                 "on_offer")

    _group: TakeOwner
    # Chunks queued; the head chunk is handed out from ``_pos``; ``_queued`` counts the
    # messages not handed out yet; ``_stale``: some queued entry may have been dropped.
    _queue: deque[Chunk]
    _pos: int
    _queued: int
    _stale: bool
    _seq: int  # messages handed out so far
    _run: int  # messages handed out since the stream last let the loop run
    _interrupted: bool  # the waiting task was woken to do something else (interrupt)
    on_offer: Callable[[], None] | None  # a batch runner's inline hand-over, or None
    # The stream's own fields and methods taking calls back into.
    _waiter: asyncio.Future[None] | None
    _resume_check: Callable[[], None]
    _wait_for_more: Callable[[], Awaitable[None]]
    wake: Callable[[], None]

    async def take(self, limit: int) -> list[Entry]:
        """Up to ``limit`` queued messages at once, as entries (see :meth:`take_part`)."""
        part = await self.take_part(limit)
        return part.entries(self._group.itemise) if isinstance(part, Pieces) else part

    async def take_part(self, limit: int) -> list[Entry] | Pieces:
        """Up to ``limit`` queued messages at once, for a batch filter (at least one): a
        list of entries, or :class:`Pieces` of counted slices (never mixed).

        The list returned may be the chunk the group queued, shared with the sibling
        watchers: the caller must not change it. Waits while the queue is empty; ends
        like iteration (StopAsyncIteration when detached, GroupFailedError when the group
        failed). A message handed out again (a later delivery round, queued as a chunk
        of its own) comes alone, so a batch never mixes a retry in. Yields the loop
        first after ``HANDOUT_RUN`` messages without suspending, as ``__anext__`` does.
        Returns empty when :meth:`interrupt` woke it.
        """
        queue = self._queue
        if self._run >= HANDOUT_RUN and queue:
            self._run = 0
            await asyncio.sleep(0)
        while True:
            out = self.take_now(limit)
            if out:
                return out
            if not queue:  # else only dropped entries were at its head: look again
                self._resume_check()
                await self._wait_for_more()
                if self._interrupted:  # woken for the runner's own work: nothing taken
                    self._interrupted = False
                    return []

    def take_now(self, limit: int) -> list[Entry] | Pieces:
        """What :meth:`take_part` takes, without waiting: maybe nothing (an inline batch
        call takes its messages so, in the step that queued them: core/inline.py). The
        usual hand-over, one share queued and taken whole, skips the general walk."""
        queue = self._queue
        head = queue[0] if len(queue) == 1 and not self._pos else None
        out: list[Entry] | Pieces
        if isinstance(head, Share) and head.n <= limit and head.run.chunk is None and (
                head.run.state is PENDING):
            queue.clear()
            self._queued = 0
            self._stale = False
            out = head  # a share taken whole is its own Pieces
        else:
            out = self._take_queued(limit)
        if out:
            n = len(out)
            self._seq += n
            self._run += n
            group = self._group
            if group.paused and self._queued <= group.low_queue:
                group.maybe_resume()
        return out

    @property
    def parked(self) -> bool:
        """The stream's task waits for messages (in :meth:`take_part` or iteration)."""
        waiter = self._waiter
        return waiter is not None and not waiter.done()

    def offered(self) -> None:
        """The group queued messages for this stream: its batch runner handles them now
        when it can (``on_offer``, core/inline.py), else the waiting filter is woken."""
        on_offer = self.on_offer
        if on_offer is None:
            self.wake()
        else:
            on_offer()

    def interrupt(self) -> None:
        """Wake the waiting task with nothing taken: its ``take_part`` returns empty."""
        self._interrupted = True
        self.wake()

    def _take_queued(self, limit: int) -> list[Entry] | Pieces:
        """Pop up to ``limit`` pending entries, whole chunks where they fit (maybe none:
        what was popped had been dropped), or the counted slices at the head."""
        queue = self._queue
        out: list[Entry] = []
        pieces: list[Piece] = []
        room = limit
        while queue:
            chunk = queue[0]
            pos = self._pos
            if not isinstance(chunk, list):
                run = chunk
                if run.chunk is not None:  # itemised since it was queued
                    if pieces:
                        break
                    chunk = queue[0] = run.chunk
                elif out:
                    break  # counted slices go in batches of their own
                else:
                    n = run.n
                    stop = min(n, pos + room)
                    if stop == n:
                        queue.popleft()
                        self._pos = 0
                    else:
                        self._pos = stop
                    self._queued -= stop - pos
                    if run.state is PENDING:  # else dropped (its partition ended)
                        pieces.append(Piece(run, pos, stop))
                        room -= stop - pos
                        if not room:
                            break
                    continue
            elif pieces:
                break
            entries = chunk
            if entries[pos].rounds > 1:  # a redelivery: a chunk of one, handed out alone
                if out:
                    break
                queue.popleft()
                self._pos = 0
                self._queued -= 1
                return [entries[0]] if entries[0].state is PENDING else []
            room = limit - len(out)
            if pos + room >= len(entries):
                part = entries[pos:] if pos else entries
                queue.popleft()
                self._pos = 0
            else:
                part = entries[pos:pos + room]
                self._pos = pos + room
            self._queued -= len(part)
            if self._stale:  # the group dropped entries since some were queued
                part = [entry for entry in part if entry.state is PENDING]
            out = out + part if out else part  # never extend: ``part`` may be shared
            if len(out) >= limit:
                break
        if not queue:
            self._stale = False
        return Pieces(pieces) if pieces else out


__all__ = ["HANDOUT_RUN", "BatchTaking", "Chunk", "Counted", "Piece", "Pieces", "TakeOwner"]

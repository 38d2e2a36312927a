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
unless the group dropped entries while some of the queue waited (``stale``: each
entry taken is checked once, until the queue empties).

Two parts a :class:`~sharedstream.core.stream.SharedStream` holds (composed, not
inherited): :class:`ChunkQueue`, the queue itself, whose fields are public because the
per-message hand-out (:mod:`sharedstream.core.handout`) walks its head inline, one
message at a time; and :class:`BatchTaker`, a batch filter's ``take_part``. The taker
knows the group only as a :class:`TakeOwner` and the stream only by the calls it was
given, so this module imports neither the group's nor the stream's.
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


class ChunkQueue(deque[Chunk]):
    """The chunks queued for one watcher, and its hand-out counts.

    A deque of the chunks itself, with plain fields: the per-message hand-out walks the
    head and moves the counts inline, from one object (a call, or a second object to
    load, per message costs more). The head chunk is handed out from ``pos``."""

    __slots__ = ("handed", "pos", "queued", "run", "stale")

    def __init__(self) -> None:
        super().__init__()
        self.pos = 0
        self.queued = 0
        """Messages queued and not handed out yet."""
        self.stale = False
        """Some queued entry may have been dropped (see :meth:`dropped`)."""
        self.handed = 0
        """Messages handed out so far (the runner's progress mark)."""
        self.run = 0
        """Messages handed out since the stream last let the loop run."""

    def offer(self, entries: Chunk) -> None:
        """Queue one chunk (shared with the sibling watchers: never changed)."""
        self.append(entries)
        self.queued += len(entries)

    def dropped(self) -> None:
        """The group dropped entries: check each taken one until the queue has emptied."""
        if self:
            self.stale = True

    def owed(self, group: TakeOwner) -> list[Entry]:
        """The entries queued and not handed out yet (counted slices itemised)."""
        return [entry for i, chunk in enumerate(self)
                for entries in [chunk if isinstance(chunk, list) else group.itemise(chunk)]
                for entry in (entries[self.pos:] if i == 0 else entries)]

    def clear(self) -> None:
        """Drop every chunk, and the counts of what was queued."""
        super().clear()
        self.pos = self.queued = 0
        self.stale = False

    def cut(self, limit: int) -> list[Entry] | Pieces:
        """Pop up to ``limit`` pending messages for a batch (maybe none: what was popped
        had been dropped). The usual hand-over, one share queued and taken whole, skips
        the general walk."""
        head = self[0] if len(self) == 1 and not self.pos else None
        if isinstance(head, Share) and head.n <= limit and head.run.chunk is None and (
                head.run.state is PENDING):
            self.clear()
            n = head.n
            self.handed += n
            self.run += n
            return head  # a share taken whole is its own Pieces
        out = self._cut_queued(limit)
        if out:
            n = len(out)
            self.handed += n
            self.run += n
        return out

    def _cut_queued(self, limit: int) -> list[Entry] | Pieces:
        """Pop up to ``limit`` pending entries, whole chunks where they fit, or the
        counted slices at the head."""
        queue = self
        out: list[Entry] = []
        pieces: list[Piece] = []
        room = limit
        while queue:
            chunk = queue[0]
            pos = self.pos
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
                        self.pos = 0
                    else:
                        self.pos = stop
                    self.queued -= stop - pos
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
                self.pos = 0
                self.queued -= 1
                return [entries[0]] if entries[0].state is PENDING else []
            room = limit - len(out)
            if pos + room >= len(entries):
                part = entries[pos:] if pos else entries
                queue.popleft()
                self.pos = 0
            else:
                part = entries[pos:pos + room]
                self.pos = pos + room
            self.queued -= len(part)
            if self.stale:  # the group dropped entries since some were queued
                part = [entry for entry in part if entry.state is PENDING]
            out = out + part if out else part  # never extend: ``part`` may be shared
            if len(out) >= limit:
                break
        if not queue:
            self.stale = False
        return Pieces(pieces) if pieces else out


class BatchTaker:
    """``take_part`` and its kin: a batch filter's side of a stream. ``wait`` suspends
    until the queue may hold something (or ends the take as iteration ends); ``ran_dry``
    is told the queue ran empty (a paused group may resume); ``wake`` wakes the task."""

    __slots__ = ("_group", "_interrupted", "_queue", "_ran_dry", "_wait", "_wake")

    def __init__(self, queue: ChunkQueue, group: TakeOwner, wait: Callable[[], Awaitable[None]],
                 ran_dry: Callable[[], None], wake: Callable[[], None]) -> None:
        self._queue = queue
        self._group = group
        self._wait = wait
        self._ran_dry = ran_dry
        self._wake = wake
        self._interrupted = False  # the waiting task was woken to do something else

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
        first after ``HANDOUT_RUN`` messages without suspending, as per-message
        iteration does. Returns empty when :meth:`interrupt` woke it.
        """
        queue = self._queue
        if queue.run >= HANDOUT_RUN and queue:
            queue.run = 0
            await asyncio.sleep(0)
        while True:
            out = self.take_now(limit)
            if out:
                return out
            if not queue:  # else only dropped entries were at its head: look again
                self._ran_dry()
                await self._wait()
                if self._interrupted:  # woken for the runner's own work: nothing taken
                    self._interrupted = False
                    return []

    def take_now(self, limit: int) -> list[Entry] | Pieces:
        """What :meth:`take_part` takes, without waiting: maybe nothing (an inline batch
        call takes its messages so, in the step that queued them: core/inline.py)."""
        queue = self._queue
        out = queue.cut(limit)
        group = self._group
        if group.paused and out and queue.queued <= group.low_queue:
            group.maybe_resume()
        return out

    def interrupt(self) -> None:
        """Wake the waiting task with nothing taken: its ``take_part`` returns empty."""
        self._interrupted = True
        self._wake()


__all__ = ["HANDOUT_RUN", "BatchTaker", "Chunk", "ChunkQueue", "Counted", "Piece", "Pieces",
           "TakeOwner"]

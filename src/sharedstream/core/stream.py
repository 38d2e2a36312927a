"""One watcher's view of its group: a facade over the parts that serve it.

The stream is what ``filter_shared_stream`` iterates and what a batch runner takes
from. It holds three parts, each with one job, and adds only its lifecycle, the wait
for more messages and the group's side:

* :class:`~sharedstream.core.batchtake.ChunkQueue`: the chunks queued for the watcher.
  The group hands each stream one list per consumed batch (the same list to every
  watcher, never changed after), so fan-out costs one call per watcher per batch; a
  batch watcher's chunk may be a counted :class:`~sharedstream.core.ledger.Slice`.
* :class:`~sharedstream.core.handout.MessageHandout`: a per-message filter's side: one
  message at a time, its window and its acks, timed by the watcher's
  :class:`~sharedstream.core.deadline.AckDeadline`. ``__aiter__`` returns it, so
  iteration costs no delegation.
* :class:`~sharedstream.core.batchtake.BatchTaker`: a batch filter's ``take_part``.

Its public names are a contract (acceptance tests outside the repository call them), so
they stay here, most as one-line delegations to the part that does the work. A stream
serves one kind of filter: a per-message one iterates it, a batch runner takes from it.

Lifecycle of a stream (:class:`StreamState`; any other move raises
:class:`~sharedstream.core.lifecycle.InvalidState`)::

    ACTIVE -> CLOSED   detach(): the watcher left or the group stopped; iteration ends
    ACTIVE -> FAILED   group_failed(): iteration raises GroupFailedError

CLOSED and FAILED are final. The stream knows its group only as a
:class:`StreamOwner` (the methods it calls back), so this module does not import the
group's.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from sharedstream.core.batchtake import HANDOUT_RUN, BatchTaker, Chunk, ChunkQueue, Pieces
from sharedstream.core.handout import MessageHandout, StreamOwner
from sharedstream.core.ledger import Entry
from sharedstream.core.lifecycle import check_move
from sharedstream.core.shares import ShareCaller
from sharedstream.core.streamconfig import ABSENT, GroupFailedError

if TYPE_CHECKING:
    from sharedstream.core.event import TriggerEvent
    from sharedstream.core.window import Window


class StreamState(enum.Enum):
    """Where a stream is in its lifecycle (the module docstring lists the moves)."""

    ACTIVE = "active"
    CLOSED = "closed"
    FAILED = "failed"


ACTIVE, CLOSED, FAILED = StreamState.ACTIVE, StreamState.CLOSED, StreamState.FAILED
MOVES = {ACTIVE: frozenset({CLOSED, FAILED}), CLOSED: frozenset[StreamState](),
         FAILED: frozenset[StreamState]()}



class SharedStream:
    """Async iterator of one watcher's messages (``raw`` as the producer yielded it).

    Its group's side of it: :meth:`offer` queues a chunk of entries, :attr:`queued`
    counts the messages queued, :meth:`wake` wakes a filter waiting for one, :meth:`detach` and
    :meth:`group_failed` end it. The runner's side: :attr:`handed` (progress),
    :attr:`on_stuck` (told of an ack timeout) and :attr:`closed`.

    Bigger than 25 methods: a facade (31). Its 26 public names are a contract (see the module
    docstring), 17 of them one-line delegations to its parts and one (``take_now``) its
    taker's own method; the rest is its own lifecycle, its wait for more messages and
    its wake.
    """

    __slots__ = ("_failure", "_group", "_handout", "_queue", "_state", "_taker", "_waiter",
                 "batch", "name", "on_offer", "on_release", "on_stuck", "share_caller", "take_now")

    def __init__(self, group: StreamOwner, name: str, now: Callable[[], float]) -> None:
        self.name = name
        self._group = group
        self._queue = ChunkQueue()
        self._handout = MessageHandout(group, name, now, self._queue, self._wait_for_more,
                                       self._resume_check, self._stuck)
        self._taker = BatchTaker(self._queue, group, self._wait_for_more, self._resume_check,
                                 self.wake)
        self.take_now = self._taker.take_now
        """What :meth:`take_part` takes, without waiting: maybe nothing (the taker's own
        method, not a delegation: an inline batch call makes one call less)."""
        # Set by a batch runner: the group may queue counted slices for this stream.
        self.batch = False
        self._waiter: asyncio.Future[None] | None = None
        self._failure: BaseException | None = None
        self._state = ACTIVE
        self.on_stuck: Callable[[], None] | None = None
        """Called after an ack timeout failed the open message (the runner restarts the
        filter)."""
        self.on_release: Callable[[bool], None] | None = None
        """A batch runner's own release (``fail_pending``), told when the stream stops."""
        self.on_offer: Callable[[], None] | None = None
        """A batch runner's inline hand-over (core/inline.py), instead of a wake."""
        self.share_caller: ShareCaller | None = None
        """A batch runner that calls a routed share past the queue (core/inline.py): in
        its group's ``ready`` while the task waits for messages and nothing is queued."""

    # -- iteration (a per-message filter's side: the hand-out) ---------------------

    def __aiter__(self) -> MessageHandout:
        return self._handout

    def __anext__(self) -> Awaitable[Any]:
        return self._handout.__anext__()

    def current_window(self) -> Window | None:
        """The window of the message being handled, built on first use."""
        return self._handout.current_window()

    def bind_event(self, event: TriggerEvent) -> bool:
        """Bind a yielded event to the open message; False if it was discarded."""
        return self._handout.bind_event(event)

    def reject(self, reason: str) -> bool:
        """Reject the open message (resolves at once); False outside a window."""
        return self._handout.reject(reason)

    def window_confirmed(self, window: Window) -> None:
        self._handout.window_confirmed(window)

    def window_failed(self, window: Window, exc: BaseException) -> None:
        self._handout.window_failed(window, exc)

    def window_rejected(self, window: Window, reason: str) -> None:
        self._handout.window_rejected(window, reason)

    def infrastructure_wait(self, window: Window, began: bool) -> None:
        """A wait on infrastructure for ``window`` began or ended (core/deadline.py)."""
        self._handout.infrastructure_wait(window, began)

    def moved_past(self) -> None:
        """The filter ended normally: it moved past the open message."""
        self._handout.moved_past()

    def fail_open(self, exc: BaseException) -> None:
        """The filter raised while handling the open message: fail it (an attempt
        unless ``exc`` is an InfrastructureError)."""
        self._handout.fail_open(exc)

    # -- taking (a batch filter's side: the taker) ---------------------------------

    async def take(self, limit: int) -> list[Entry]:
        """Up to ``limit`` queued messages at once, as entries (see :meth:`take_part`)."""
        return await self._taker.take(limit)

    async def take_part(self, limit: int) -> list[Entry] | Pieces:
        """Up to ``limit`` queued messages at once, for a batch filter
        (:meth:`BatchTaker.take_part <sharedstream.core.batchtake.BatchTaker.take_part>`)."""
        return await self._taker.take_part(limit)

    def interrupt(self) -> None:
        """Wake the waiting task with nothing taken: its ``take_part`` returns empty."""
        self._taker.interrupt()

    @property
    def parked(self) -> bool:
        """The stream's task waits for messages (in :meth:`take_part` or iteration)."""
        waiter = self._waiter
        return waiter is not None and not waiter.done()

    def listed_ready(self) -> None:
        """The queue was emptied in the group's step (core/inline.py) and the task still
        waits: the runner takes the next routed share at once again."""
        caller, waiter = self.share_caller, self._waiter
        if (caller is not None and waiter is not None and not waiter.done()
                and not self._queue.queued):
            self._group.ready[self.name] = caller

    def _unlisted(self) -> None:
        """Not (or no longer) waiting with nothing queued: out of the group's ``ready``
        (only its own runner: a watcher of the same name that joined since keeps its)."""
        caller = self.share_caller
        if caller is not None:
            ready = self._group.ready
            if ready.get(self.name) is caller:
                del ready[self.name]

    def offered(self) -> None:
        """The group queued messages for this stream: its batch runner handles them now
        when it can (``on_offer``, core/inline.py), else the waiting filter is woken."""
        on_offer = self.on_offer
        if on_offer is None:
            self.wake()
        else:
            on_offer()

    # -- the queue ---------------------------------------------------------------------

    def offer(self, entries: Chunk) -> None:
        """Queue entries for this watcher: one call per consumed batch (the fan-out).
        ``entries`` is shared with the sibling watchers and must not change."""
        self._queue.offer(entries)
        if self._waiter is not None:
            self._unlisted()  # what comes next is queued behind this

    def dropped(self) -> None:
        """The group dropped entries (partitions ended): some queued ones may be among
        them, so :meth:`take` checks each entry until the queue has emptied once."""
        self._queue.dropped()

    @property
    def queued(self) -> int:
        """Messages waiting for this watcher (not yet handed to its filter)."""
        return self._queue.queued

    @property
    def handed(self) -> int:
        """Messages handed to the filter so far (the runner's progress mark), those its
        batch runner was handed past the queue included."""
        caller = self.share_caller
        return self._queue.handed + (0 if caller is None else caller.past_queue)

    # -- waiting for more --------------------------------------------------------------

    async def _wait_for_more(self) -> None:
        """Suspend until the queue may hold something (the slow path of iteration and of
        :meth:`take`); end iteration as the stream's state says instead, when it ended."""
        self._handout.flush_acks()
        state = self._state
        if state is FAILED:
            raise GroupFailedError(
                f"shared-stream group {self._group.key!r} failed: {self._failure!r}"
            ) from self._failure
        if state is CLOSED:
            raise StopAsyncIteration
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        caller = self.share_caller
        if caller is not None:  # nothing is queued (or it would not wait)
            self._group.ready[self.name] = caller
        try:
            await waiter
        finally:
            self._waiter = None
            self._unlisted()  # also when cancelled: the future is done before this runs
        self._queue.run = 0

    def _resume_check(self) -> None:
        """The queue ran empty: a paused group may resume. Where it ran empty over entries
        the group dropped (their partition ended while they were queued), no handout
        crossed the resume mark and nothing in flight is left to settle: without this
        check the group would stay paused for good."""
        group = self._group
        if group.paused:
            self._handout.flush_acks()  # what resumes counts what is in flight
            group.maybe_resume()

    def wake(self) -> None:
        """Wake the filter if it waits for a message (cheap when it does not); either
        way its runner no longer takes a share at once (a release ends that too)."""
        waiter = self._waiter
        if waiter is not None:
            if not waiter.done():
                waiter.set_result(None)
            self._unlisted()

    def _stuck(self) -> None:
        if self.on_stuck is not None:
            self.on_stuck()

    # -- lifecycle -------------------------------------------------------------------

    @property
    def state(self) -> StreamState:
        return self._state

    @property
    def closed(self) -> bool:
        """True once the stream serves no more messages (detached or its group failed)."""
        return self._state is not ACTIVE

    def _end(self, state: StreamState) -> None:
        self._state = check_move(f"stream of watcher {self.name!r}", MOVES, self._state, state)

    def detach(self, fail_pending: bool) -> None:
        """Stop serving this stream; optionally fail what it still owed (as absent)."""
        self._end(CLOSED)
        self._release(fail_pending)

    def group_failed(self, exc: BaseException) -> None:
        """The group failed with ``exc``: the filter's next message raises it."""
        self._end(FAILED)
        self._failure = exc
        self._release(fail_pending=False)

    def _release(self, fail_pending: bool) -> None:
        handout = self._handout
        handout.flush_acks()
        if fail_pending:
            group = self._group
            for entry in self._queue.owed(group) + handout.owed():
                group.fail(entry, self.name, ABSENT, counts=False)
        handout.release()
        self._queue.clear()
        if self.on_release is not None:
            self.on_release(fail_pending)
        self.wake()


__all__ = ["HANDOUT_RUN", "SharedStream", "StreamOwner", "StreamState"]

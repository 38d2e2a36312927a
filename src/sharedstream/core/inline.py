"""Batch calls made in the step that queued the messages, not in a woken task (issue 42).

A batch watcher's runner waits in its own task for messages. Waking it costs a Future, a
loop turn and a task step, about as much as the call itself; with 10,000 watchers each
routed one message of a consumed batch, that wake was most of the cost of a message.
So when messages are queued for a watcher whose runner is parked waiting for them, the
fan-out hands them over in its own step (:meth:`InlineCalls.offered`): it takes them
(``take_now``), starts the filter's call, and when the call returns without waiting on
anything (the usual batch: parse, test, emit) settles it there, exactly as the runner
would have. The runner's task is never woken.

A routed watcher handed exactly one share of a consumed batch (with 10,000 watchers
each wanting 1/10,000, nearly every one) skips even its queue: when its runner is in
the group's ``ready`` (its task waits for messages, nothing is queued for it, no call's
rest is owed), the fan-out gives the share's messages to
:meth:`InlineCalls.call_share`, which calls the filter at once if the share is whole
(its slice neither itemised nor dropped) and fits a batch; else it declines, and the
fan-out queues the share and hands it over as above. The stream keeps that list (it
lists its runner as the task starts to wait, and takes it out when something is queued,
the task is woken or the stream released), so the fan-out asks one dict per share and
touches no other object of the watcher's before the call: at 10,000 watchers each is
cold in the cache, and the stream, its queue and its task's future checked per call
were a fifth of the cost of a message. A call that returns having said and staged
nothing resolves the share with one count, and the share is never made an object
(:class:`~sharedstream.core.shares.Shares`); any other outcome opens it and goes on as a
call of a queued share would. The messages count into the stream's ``handed`` (the
runner's progress) through ``past_queue``.

A call that does wait (a state read, a sleep), or raises, is not finished here: what
remains of it runs in the runner's own task, as if that task had made the call (its ack
timeout, cancellation and restart, its split of a raising batch): the task is woken with
nothing taken (``interrupt``) and first runs the remainder (:attr:`InlineCalls._pending`).
The suspended call is resumed there by :class:`Resumed`, which passes on whatever the
task sends or throws, as ``await`` would. The call's first step ran in a copy of the
runner task's context (``current_stream`` is the runner), so state access and rejection
find the running call the same way. A trigger with a ``prepare`` step (a registry
format) is never called inline: that step awaits.

:data:`running` names the watcher whose call runs inline now, for the loop watch
(``triggerer.loopwatch``): the step runs in the fan-out's task, and the watcher, not the
framework, is what holds the loop then.

Failure windows: none added; a call started here is settled, failed or given up exactly
as one the runner's task made (its messages were taken the same way). A runner whose
task is cancelled while it waits stays listed until the task runs its cancellation: a
share routed to it in that turn is still called (as if it had come a turn earlier) and
settled by the runner, which outlives its task; a call of it that waits is given up
when the watcher leaves, as that cancellation goes on to do, like any call running then.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any

from sharedstream.core.batchtake import HANDOUT_RUN, Pieces
from sharedstream.core.deadline import AckDeadline
from sharedstream.core.ledger import Entry, State
from sharedstream.core.messagebatch import MessageBatch
from sharedstream.core.shares import Shares
from sharedstream.core.stream import SharedStream, StreamOwner
from sharedstream.core.streamconfig import Clock

running: str | None = None
"""The watcher whose batch call runs inline right now (read by the loop watch's thread)."""

PENDING = State.PENDING
_RETURNED = object()  # what the first step of a call that returned gives
NOTHING_TAKEN: list[Entry] = []  # a runner's batch between calls (never changed)


def batch_of(part: list[Entry] | Pieces) -> MessageBatch:
    """What the filter is called with for ``part`` (the messages of its entries or
    pieces)."""
    return MessageBatch(part.messages if isinstance(part, Pieces)
                        else [entry.raw for entry in part])


class Resumed:
    """Awaitable: the rest of coroutine ``coro`` after its first step yielded ``first``.

    Awaited in a task, it yields ``first`` to the task (which waits on it as the
    coroutine asked), then sends or throws whatever the task gives back into ``coro``,
    step by step, until it returns: the task runs the coroutine as if it had awaited it
    from the start."""

    __slots__ = ("_coro", "_first")

    def __init__(self, coro: Coroutine[Any, Any, Any], first: Any) -> None:
        self._coro = coro
        self._first = first

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, yielded = self._coro, self._first
        while True:
            try:
                sent = yield yielded
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # a cancellation, or an error thrown in
                try:
                    yielded = coro.throw(exc)
                except StopIteration as done:
                    return done.value
                continue
            try:
                yielded = coro.send(sent)
            except StopIteration as done:
                return done.value


class InlineCalls:
    """``offered``: the inline side of a batch runner (a base of ``BatchRunner``)."""

    name: str
    _stream: SharedStream
    _group: StreamOwner
    _call: Callable[[MessageBatch], Coroutine[Any, Any, None]]
    _limit: int
    _taken: list[Entry] | Pieces | Shares  # Shares: one called unopened (``call_share``)
    past_queue: int  # messages called past the queue (``SharedStream.handed`` adds them)
    _done: int
    _token: int
    _calling: bool
    _window: Any
    _deadline: AckDeadline
    _clock: Clock
    # The runner's own methods inline calls use.
    _settle: Callable[[MessageBatch, list[Entry] | Pieces], None]
    _abandon_call: Callable[[], None]
    _finish: Callable[[list[Entry] | Pieces, MessageBatch, int,
                       Coroutine[Any, Any, None], Any], Awaitable[None]]
    _failed: Callable[[list[Entry] | Pieces, int, BaseException], Awaitable[None]]

    # Set by the runner's task: its context, once it runs; the work it owes first, and
    # the suspended call that work resumes (closed if the call is given up before).
    _context: contextvars.Context | None
    _pending: Callable[[], Awaitable[None]] | None
    _suspended: Coroutine[Any, Any, None] | None

    def offered(self) -> None:
        """Messages were queued for this watcher: handle them now, in the caller's step,
        when the runner's task waits for them (at most ``HANDOUT_RUN`` messages; the task
        is woken for more); else just wake the task."""
        stream = self._stream
        if self._context is None or self._pending is not None or not stream.parked:
            stream.wake()
            return
        handled = 0
        take, limit = stream.take_now, self._limit
        while stream.queued:
            if handled >= HANDOUT_RUN:
                stream.wake()
                return
            part = take(limit)
            n = len(part)
            if not n:
                continue  # dropped entries only: look again
            handled += n
            batch = batch_of(part)
            if not self._call_now(part, batch):
                return  # the rest is the task's now
            self._settle(batch, part)
            self._taken = NOTHING_TAKEN
        stream.listed_ready()

    def call_share(self, shares: Shares, raws: list[Any]) -> bool:
        """Call the filter now on ``raws``, this watcher's share of the routed slice of
        ``shares``, past the queue. The fan-out calls it only while this runner is in
        its group's ``ready`` (its task waits, nothing is queued, no call's rest is owed:
        ``SharedStream`` keeps that list); False (nothing done) when the slice is no
        longer whole or the share is bigger than a batch: the caller queues it then.

        A call that returns having said and staged nothing resolves the share with one
        count and no object (nearly every call at 10,000 watchers); any other outcome
        opens the share (``Shares.open``) and goes on as a call of it would."""
        run = shares.run
        n = len(raws)
        if n > self._limit or run.chunk is not None or run.state is not PENDING:
            return False
        self.past_queue += n
        batch = MessageBatch(raws)
        # ``_call_now``'s start, written out: one Python frame fewer on the path of
        # nearly every call at 10,000 watchers.
        self._taken, self._done = shares, 0
        token = self._token
        self._window = None
        self._calling = True
        coro = self._call(batch)
        global running
        running = self.name
        try:
            yielded = self._context.run(next, coro.__await__(), _RETURNED)  # type: ignore[union-attr]
        except BaseException as exc:
            running = None
            self._to_task(token, batch, coro, None, exc)
            return True
        running = None
        if yielded is not _RETURNED:
            self._to_task(token, batch, coro, yielded)
            return True
        self._calling = False
        if (batch.emitted is None and batch.rejected is None and self._window is None
                and run.entries is None and run.state is PENDING and token == self._token):
            shares.resolved.add(self.name)  # kept nothing: no object, one count
            self._group.share_done(run)
        elif token == self._token:
            self._settle(batch, self._opened())
        self._taken = NOTHING_TAKEN
        return True

    def _opened(self) -> list[Entry] | Pieces:
        """The batch being handled; a share called unopened (``call_share``) is opened
        now."""
        taken = self._taken
        if isinstance(taken, Shares):
            taken = self._taken = taken.open(self.name)
        return taken

    def _call_now(self, part: list[Entry] | Pieces | Shares, batch: MessageBatch) -> bool:
        """Start the call on ``batch`` (of ``part``) here; True when it returned here too
        (the caller settles it), False when it raised or waits (the rest is the task's)
        or was given up meanwhile."""
        context = self._context
        assert context is not None
        self._taken, self._done = part, 0
        token = self._token
        self._window = None
        self._calling = True
        coro = self._call(batch)
        global running
        running = self.name
        try:
            # Its first step as ``next`` with a default: a call that returns ends it
            # without a StopIteration raised and caught (a third of a bare call's cost).
            yielded = context.run(next, coro.__await__(), _RETURNED)
        except BaseException as exc:
            self._to_task(token, batch, coro, None, exc)
            return False
        finally:
            running = None
        if yielded is _RETURNED:
            self._calling = False
            if token == self._token:
                return True
            self._taken = NOTHING_TAKEN
            return False
        self._to_task(token, batch, coro, yielded)
        return False

    def _to_task(self, token: int, batch: MessageBatch, coro: Coroutine[Any, Any, None],
                 yielded: Any, exc: BaseException | None = None) -> None:
        """Hand the rest of the call to the runner's task (see the module docstring):
        its split when the first step raised ``exc`` (``_failed``), else its resumption
        where it waits on ``yielded`` (``_finish``). Only a call that waits can overrun
        its ack timeout: its deadline starts here (the step before it held the loop, and
        was no one else's wait)."""
        work: Callable[[], Awaitable[None]]
        if exc is not None:
            self._calling = False
            self._abandon_call()
            work = functools.partial(self._failed, self._opened(), token, exc)
        else:
            deadline = self._deadline
            deadline.start = self._clock.now()
            deadline.arm()
            self._suspended = coro
            work = functools.partial(self._finish, self._opened(), batch, token, coro, yielded)
        self._pending = work
        self._stream.interrupt()


__all__ = ["InlineCalls", "Resumed", "batch_of", "running"]

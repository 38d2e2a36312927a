"""The parts of counted slices a batch watcher is handed, and a routed watcher's share.

A batch watcher is handed counted slices (no entry per message) as :class:`Pieces`:
``[start, stop)`` of each, acknowledged with one count per slice (``ack_range``).

In a routed group (issue 42) a batch watcher with a match is not queued the whole slice
of a partition's batch: it is queued a :class:`Share`, the positions in the slice its
match took, and acknowledges it as it would a slice (one count per batch, ``done`` the
prefix it resolved). The slice keeps its shares (:class:`Shares`) so that, itemised,
each entry is owed by exactly the watchers it was routed to and had not resolved it yet.

With 10,000 watchers each routed about one message of a consumed batch, nearly every
watcher's share is called at once, in the fan-out's step, and returns having kept
nothing: such a share is never made an object (:class:`Shares`). A share queued is
handed out as it is: a share *is* the pieces of itself, so a call costs no objects
beyond its share (a :class:`Pieces` and its list of :class:`Piece` per call were a tenth
of the time of such a call).

Failure window: none of its own; shares live in memory with their slice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from sharedstream.core.partition import Entry, Slice, State


class Piece(NamedTuple):
    """``[start, stop)`` of a counted slice (or of a watcher's share of one)."""

    run: Counted
    start: int
    stop: int


class Pieces:
    """Parts of counted slices handed to a batch watcher as one batch, in queue order;
    ``messages`` is what the filter receives (the slice's own list when the batch is all
    of one slice: never changed)."""

    __slots__ = ("messages", "parts")

    def __init__(self, parts: list[Piece]) -> None:
        self.parts = parts
        run, start, stop = parts[0]
        if len(parts) == 1 and start == 0 and stop == run.n:
            self.messages: list[Any] = run.raws
        else:
            self.messages = run.raws[start:stop]  # a new list: never extend a slice's own
            for run, start, stop in parts[1:]:
                self.messages += run.raws[start:stop]

    def __len__(self) -> int:
        return len(self.messages)

    def entries(self, itemise: Callable[[Counted], list[Entry]]) -> list[Entry]:
        """The entries of these messages (each slice itemised: something needs them)."""
        return [entry for run, start, stop in self.parts for entry in itemise(run)[start:stop]]

    def settled(self, ack: Callable[[Counted, int, int, str], None], watcher: str) -> None:
        """``watcher`` resolved all of these cleanly: one ``ack`` per part."""
        for run, start, stop in self.parts:
            ack(run, start, stop, watcher)


class Share(Pieces):
    """The messages of a counted slice routed to one watcher, in order.

    ``positions`` in the slice, ``raws`` the messages there (the filter's batch, also
    ``messages``: the list the index routed, never changed; not the slice's own, which
    is emptied when the slice is itemised, perhaps before the share is made). ``done``
    is the prefix of it the watcher resolved cleanly; when it reaches ``n`` the slice's
    ``pending`` drops by one. Once the slice is itemised,
    :attr:`chunk` is the entries of the share, aligned with it.

    Handed out whole, it is its own :class:`Pieces` (one part: all of it); it has no
    ``parts`` list, the methods of :class:`Pieces` say what it is.
    """

    __slots__ = ("_chunk", "done", "n", "positions", "raws", "run", "watcher")

    def __init__(self, run: Slice, watcher: str, positions: list[int], raws: list[Any]
                 ) -> None:  # no Pieces.__init__: no parts list (see the class docstring)
        self.run = run
        self.watcher = watcher
        self.positions = positions
        self.n = len(positions)
        self.raws = self.messages = raws
        self.done = 0
        self._chunk: list[Entry] | None = None

    def __len__(self) -> int:
        return self.n

    @property
    def state(self) -> State:
        return self.run.state

    @property
    def chunk(self) -> list[Entry] | None:
        """The entries of the share once its slice is itemised (None before)."""
        chunk = self._chunk
        if chunk is None:
            whole = self.run.chunk
            if whole is None:
                return None
            chunk = self._chunk = [whole[i] for i in self.positions]
        return chunk

    def entries(self, itemise: Callable[[Counted], list[Entry]]) -> list[Entry]:
        return list(itemise(self))  # a copy: the share's own list is its queue's chunk

    def settled(self, ack: Callable[[Counted, int, int, str], None], watcher: str) -> None:
        ack(self, 0, self.n, watcher)

    def __repr__(self) -> str:
        return f"Share({self.watcher!r}, {self.n} of {self.run!r}, done={self.done})"


Counted = Slice | Share  # a counted slice, or a routed watcher's share of one


Routed = dict[str, tuple[list[int], list[Any]]]
"""A slice routed: per watcher with a match, its positions in the slice and the messages
there (``RoutingIndex.route_all``), in the order the watchers are handed their shares."""


class Shares:
    """A routed slice's shares (:class:`~sharedstream.core.partition.OwedShares` is what
    the ledger asks of them): ``routed``, what each watcher was routed, and a
    :class:`Share` object only for the watchers that needed one.

    A watcher whose call on its share ran and returned cleanly in the fan-out's own
    step (``InlineCalls.call_share``) needs no object: its name in ``resolved`` says it owes
    nothing. Any other watcher's share is opened (:meth:`open`: it was queued, or its
    call did more than return), and its ``done`` says what it still owes. (A
    :class:`Share` per watcher was a third of the cost of a routed call at 10,000
    watchers.)
    """

    __slots__ = ("opened", "resolved", "routed", "run", "several")

    def __init__(self, run: Slice, routed: Routed, several: bool) -> None:
        self.run = run
        self.routed = routed
        self.several = several
        """Some watcher was routed more than one message (else each exactly one)."""
        self.resolved: set[str] = set()
        self.opened: dict[str, Share] | None = None

    def open(self, watcher: str) -> Share:
        """``watcher``'s share as an object (made once: later calls return it)."""
        opened = self.opened
        if opened is None:
            opened = self.opened = {}
        share = opened.get(watcher)
        if share is None:
            positions, raws = self.routed[watcher]
            share = opened[watcher] = Share(self.run, watcher, positions, raws)
        return share

    def owed(self, n: int) -> tuple[int, list[tuple[int, frozenset[str]] | None]]:
        """How many shares still owe all of the slice, and per position ``(shares owing
        it, watchers it was routed to)``, None where it was routed to none. O(messages
        routed), on the slow path that itemises."""
        owing_shares = 0
        names: list[list[str] | None] = [None] * n
        owing = [0] * n
        opened, resolved = self.opened or {}, self.resolved
        for watcher, (positions, _) in self.routed.items():
            share = opened.get(watcher)
            done = (share.done if share is not None
                    else len(positions) if watcher in resolved else 0)
            if done < len(positions):
                owing_shares += 1
            for j, i in enumerate(positions):
                found = names[i]
                if found is None:
                    names[i] = [watcher]
                else:
                    found.append(watcher)
                if j >= done:
                    owing[i] += 1
        return owing_shares, [None if found is None else (owing[i], frozenset(found))
                              for i, found in enumerate(names)]


class ShareCaller(Protocol):
    """A batch runner whose task waits with nothing queued: it calls a routed share at
    once, in the fan-out's step (``InlineCalls.call_share``, core/inline.py).
    ``past_queue`` counts the messages it was handed so."""

    past_queue: int

    def call_share(self, shares: Shares, raws: list[Any]) -> bool:
        """Call the filter on ``raws``, this watcher's share of ``shares``' slice; False
        (nothing done) when it cannot take it so: the caller queues it."""


Ready = dict[str, ShareCaller]
"""A group's batch runners that call a routed share at once, by watcher name: each is
listed while its task waits for messages with nothing queued (``SharedStream``)."""


__all__ = ["Counted", "Piece", "Pieces", "Ready", "Routed", "Share", "ShareCaller", "Shares"]

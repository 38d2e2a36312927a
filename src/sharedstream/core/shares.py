"""The parts of a counted slice routed to each watcher with a match (issue 42).

In a routed group a batch watcher with a match is not handed the whole slice of a
partition's batch: it is handed a :class:`Share`, the positions in the slice its match
took, and acknowledges it as it would a slice (one count per batch, ``done`` the prefix
it resolved). The slice keeps its shares (:class:`Shares`) so that, itemised, each
entry is owed by exactly the watchers it was routed to and had not resolved it yet.

Failure window: none of its own; shares live in memory with their slice.
"""

from __future__ import annotations

from typing import Any

from sharedstream.core.partition import Entry, Slice, State


class Share:
    """The messages of a counted slice routed to one watcher, in order.

    ``positions`` in the slice, ``raws`` the messages there (the filter's batch: the
    slice's own list when the watcher takes all of it, never changed). ``done`` is the
    prefix of it the watcher resolved cleanly; when it reaches ``n`` the slice's
    ``pending`` drops by one. Once the slice is itemised, :attr:`chunk` is the entries
    of the share, aligned with it.
    """

    __slots__ = ("_chunk", "done", "n", "positions", "raws", "run", "watcher")

    def __init__(self, run: Slice, watcher: str, positions: list[int], raws: list[Any]
                 ) -> None:
        self.run = run
        self.watcher = watcher
        self.positions = positions
        self.n = len(positions)
        self.raws = raws if self.n < run.n else run.raws
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

    def __repr__(self) -> str:
        return f"Share({self.watcher!r}, {self.n} of {self.run!r}, done={self.done})"


class Shares(list[Share]):
    """A slice's shares (:class:`~sharedstream.core.partition.OwedShares` is what the ledger
    asks of them)."""

    def owed(self, n: int) -> tuple[int, list[tuple[int, frozenset[str]] | None]]:
        """How many shares still owe all of the slice, and per position ``(shares owing
        it, watchers it was routed to)``, None where it was routed to none. O(messages
        routed), on the slow path that itemises."""
        owing_shares = 0
        names: list[list[str] | None] = [None] * n
        owing = [0] * n
        for share in self:
            if share.done < share.n:
                owing_shares += 1
            for j, i in enumerate(share.positions):
                found = names[i]
                if found is None:
                    names[i] = [share.watcher]
                else:
                    found.append(share.watcher)
                if j >= share.done:
                    owing[i] += 1
        return owing_shares, [None if found is None else (owing[i], frozenset(found))
                              for i, found in enumerate(names)]


__all__ = ["Share", "Shares"]

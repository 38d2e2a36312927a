"""A group's routing: its watchers' matches, the index they compile to, who takes all.

The group hands each consumed batch out through :class:`Routes` once any watcher of its
cohort has a match: a message goes to the watchers without one (:attr:`Routes.everyone`)
and to those whose match it satisfies, found by the index
(:class:`~sharedstream.core.routing.RoutingIndex`), never by asking every watcher. A
group whose watchers have no match keeps the broadcast path (no index, no lookup).

Matches come from the cohort's declaration and from each watcher as it subscribes (its
trigger's ``match``, which wins); a change is validated at once and compiled when the
next batch is routed, so 10,000 watchers subscribing one by one compile the index once.
A watcher whose match is not known yet (declared by name only, not subscribed) takes
everything: what is held for it while it is missing is then a superset of its share.

Failure window: none; routing is pure and in memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sharedstream.core.partition import Slice
from sharedstream.core.routing import MatchError, RoutingIndex, Rule, compile_match
from sharedstream.core.shares import Shares


def check_match(name: str, match: Any) -> tuple[Rule, ...] | None:
    """``match`` compiled (None for no match); :class:`MatchError`, naming the watcher,
    when it is not valid."""
    if match is None:
        return None
    try:
        return compile_match(match)
    except MatchError as exc:
        raise MatchError(f"match of watcher {name!r}: {exc}") from None


class Routes:
    """The matches of one group's cohort and the index compiled from them."""

    __slots__ = ("_compiled", "_everyone", "_index", "_routed", "_stale", "_targets", "cohort",
                 "matches")

    def __init__(self, cohort: frozenset[str], matches: Mapping[str, Any]) -> None:
        self.cohort = cohort
        self.matches: dict[str, Any] = {}
        # Each match compiled once, when it is validated; the index is built from these
        # (at 10,000 watchers a compile each was a tenth of a second of start-up).
        self._compiled: dict[str, tuple[Rule, ...]] = {}
        for name, match in matches.items():
            if name in cohort and match is not None:
                self._set(name, match)
        self._index: RoutingIndex | None = None
        self._stale = True
        self._targets: dict[tuple[str, ...], frozenset[str]] = {}
        self._routed: frozenset[str] | None = None
        self._everyone: frozenset[str] | None = None

    def validated(self, name: str, match: Any) -> bool:
        """Whether ``match`` (the object itself) is what ``name`` wants already: it was
        validated when it was set (the cohort's declared match, as the watcher's trigger
        holds it)."""
        return self.matches.get(name) is match

    def set_match(self, name: str, match: Any) -> None:
        """What ``name`` wants now (None: everything); ValueError for an invalid match."""
        if self.matches.get(name) == match:
            return
        if match is None:
            del self.matches[name]
            self._compiled.pop(name, None)
        else:
            self._set(name, match)
        self._changed()

    def _set(self, name: str, match: Any) -> None:
        rules = check_match(name, match)
        assert rules is not None
        self._compiled[name] = rules
        self.matches[name] = match

    def _changed(self) -> None:
        """O(1): the sets are built when next read, so 10,000 watchers subscribing one
        by one with matches the cohort did not declare cost O(watchers), not O(watchers²)."""
        self._routed = self._everyone = None
        self._stale = True
        if self._targets:
            self._targets = {}

    @property
    def routed(self) -> frozenset[str]:
        """The watchers with a match."""
        routed = self._routed
        if routed is None:
            routed = self._routed = frozenset(self.matches)
        return routed

    @property
    def everyone(self) -> frozenset[str]:
        """The watchers of the cohort without a match: they take every message."""
        everyone = self._everyone
        if everyone is None:
            everyone = self._everyone = self.cohort - self.routed
        return everyone

    def index(self) -> RoutingIndex | None:
        """The compiled index (compiled now after a change); None when no watcher of the
        group has a match: then nothing is routed, every message goes to everyone."""
        if self._stale:
            self._stale = False
            self._index = (RoutingIndex({name: self.matches.get(name) for name in self.cohort},
                                        self._compiled)
                           if self.matches else None)
            self._compiled = {}  # the index holds what it needs; garbage the collector skips
        return self._index

    def share(self, run: Slice, index: RoutingIndex) -> tuple[Shares, int]:
        """The shares of a counted slice, one per watcher routed some of it (no object
        each until one is needed: :class:`~sharedstream.core.shares.Shares`), and how
        many of its messages no match took."""
        routed, unrouted, several = index.route_all(run.raws)
        return Shares(run, routed, several), unrouted

    def targets(self, names: tuple[str, ...]) -> frozenset[str]:
        """Every watcher a message routed to ``names`` is addressed to (and those taking
        everything): one set per combination of names, kept."""
        found = self._targets.get(names)
        if found is None:
            if len(self._targets) > 4096:  # many combinations: keep the cache bounded
                self._targets.clear()
            found = self._targets[names] = self.everyone.union(names)
        return found

    def absent_routed(self, absent: Mapping[str, str]) -> dict[str, str] | None:
        """Of the watchers missing for a batch, those with a match (held only for what is
        routed to them)."""
        found = {name: why for name, why in absent.items() if name in self.routed}
        return found or None

    def absent_everyone(self, absent: Mapping[str, str]) -> dict[str, str] | None:
        """Of the watchers missing for a batch, those taking everything (failed for all)."""
        found = {name: why for name, why in absent.items() if name not in self.routed}
        return found or None


__all__ = ["Routes", "check_match"]

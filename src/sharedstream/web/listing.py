"""The watcher and held-message lists, indexed once per snapshot and searched in place.

Neither list is a table: watchers are the recorded groups' watcher sets joined with the
live triggerers' ``/status`` documents, held messages are only in those documents. A
process may run 10,000 watchers, and the console is polled every two seconds by every
open page, so the join is done once per snapshot (at most once a second), sorted, and
kept on the snapshot; a request filters that index (a substring test per name, any
case) and slices one page, and only the page's rows get what costs a query (their
rejection counts, in ``sources.py``). The order is the sort of the index, so a page is
stable while the snapshot's data is.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from sharedstream.web.live import LiveGroup, Snapshot, live_groups

Row = dict[str, Any]
T = TypeVar("T")


def folded(text: str | None) -> str | None:
    """A search text as it is compared (any case); None for none or blank."""
    text = (text or "").strip()
    return text.casefold() or None


def memo(snapshot: Snapshot, name: str, build: Callable[[Snapshot], T]) -> T:
    """``build(snapshot)``, computed once per snapshot."""
    found = snapshot.indexes.get(name)
    if found is None:
        found = snapshot.indexes[name] = build(snapshot)
    return cast(T, found)


def held_json(group: str, owner: str, held: Mapping[str, Any]) -> Row:
    reasons = {str(k): str(v) for k, v in (held.get("reasons") or {}).items()}
    return {"consumer_group": group, "triggerer": owner, "topic": str(held["topic"]),
            "partition": int(held["partition"]), "offset": int(held["offset"]),
            "watchers": sorted(reasons), "reasons": reasons,
            "attempts": {str(k): int(v) for k, v in (held.get("attempts") or {}).items()},
            "rounds": int(held.get("rounds") or 0), "retry_in": held.get("retry_in")}


def held_index(snapshot: Snapshot) -> list[Row]:
    """Every held message of the live triggerers, by group, topic, partition, offset;
    ``_search`` is what ``q`` looks in (the topic and the watchers' names)."""
    found = []
    for name, live in live_groups(snapshot).items():
        for owner, held in live.held:
            item = held_json(name, owner, held)
            item["_search"] = "\n".join([item["topic"], *item["watchers"]]).casefold()
            found.append(item)
    found.sort(key=lambda h: (h["consumer_group"], h["topic"], h["partition"], h["offset"],
                              h["triggerer"]))
    return found


@dataclass(frozen=True, slots=True)
class GroupFacts:
    """What the snapshot says of one group's watchers."""

    topics: list[str]
    present: frozenset[str]
    held: Counter[str]
    matches: dict[str, Any]


@dataclass(frozen=True, slots=True)
class WatcherIndex:
    """Every (watcher, group) of a snapshot, sorted by name then group, as plain tuples
    (10,000 of them sort and filter in milliseconds); a row is built for the page only."""

    keys: list[tuple[str, str, str]]  # (name, group, name folded)
    groups: dict[str, GroupFacts]

    def select(self, group: str | None, text: str | None) -> list[tuple[str, str, str]]:
        return [k for k in self.keys if (group is None or k[1] == group)
                and (text is None or text in k[2])]

    def row(self, key: tuple[str, str, str]) -> Row:
        name, group, _ = key
        facts = self.groups[group]
        return {"name": name, "consumer_group": group, "topics": facts.topics,
                "present": name in facts.present, "held": facts.held[name],
                "match": facts.matches.get(name)}


def watcher_index(snapshot: Snapshot) -> WatcherIndex:
    """Every watcher of every group: recorded, or in a live triggerer's cohort."""
    recorded = snapshot.recorded
    live = live_groups(snapshot)
    keys: list[tuple[str, str, str]] = []
    groups = {}
    for group in set(recorded) | set(live):
        members = live.get(group, LiveGroup())
        names = set((recorded.get(group) or {}).get("watchers", []))
        names |= {w for _, d in members.members for w in d.get("cohort", [])}
        matches: dict[str, Any] = {}  # what each watcher with a match wants
        for _, doc in members.members:
            matches.update(doc.get("matches") or {})
        groups[group] = GroupFacts(
            topics=(recorded.get(group) or {}).get("topics", []),
            present=frozenset(w for _, d in members.members for w in d.get("present", [])),
            held=Counter(w for _, h in members.held for w in (h.get("reasons") or {})),
            matches=matches)
        keys.extend((w, group, w.casefold()) for w in names)
    keys.sort()
    return WatcherIndex(keys, groups)


def public(row: Row) -> Row:
    """The row without the index's own keys."""
    return {k: v for k, v in row.items() if not k.startswith("_")}

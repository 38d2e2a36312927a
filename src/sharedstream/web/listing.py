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
from typing import Any

from sharedstream.web.live import LiveGroup, Snapshot, live_groups

Row = dict[str, Any]


def folded(text: str | None) -> str | None:
    """A search text as it is compared (any case); None for none or blank."""
    text = (text or "").strip()
    return text.casefold() or None


def memo(snapshot: Snapshot, name: str, build: Callable[[Snapshot], list[Row]]) -> list[Row]:
    """``build(snapshot)``, computed once per snapshot."""
    found = snapshot.indexes.get(name)
    if found is None:
        found = snapshot.indexes[name] = build(snapshot)
    return found


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


def watcher_index(snapshot: Snapshot) -> list[Row]:
    """Every watcher of every group (recorded, or in a live triggerer's cohort), by name
    then group, with what the snapshot says of it; ``_search`` is its name folded."""
    recorded = snapshot.recorded
    live = live_groups(snapshot)
    found: list[Row] = []
    for group in set(recorded) | set(live):
        members = live.get(group, LiveGroup())
        names = set((recorded.get(group) or {}).get("watchers", []))
        names |= {w for _, d in members.members for w in d.get("cohort", [])}
        present = {w for _, d in members.members for w in d.get("present", [])}
        matches: dict[str, Any] = {}  # what each watcher with a match wants
        for _, doc in members.members:
            matches.update(doc.get("matches") or {})
        held = Counter(w for _, h in members.held for w in (h.get("reasons") or {}))
        topics = (recorded.get(group) or {}).get("topics", [])
        found.extend({"name": w, "consumer_group": group, "topics": topics,
                      "present": w in present, "held": held[w], "match": matches.get(w),
                      "_search": w.casefold()} for w in names)
    found.sort(key=lambda w: (w["name"], w["consumer_group"]))
    return found


def public(row: Row) -> Row:
    """The row without the index's own keys."""
    return {k: v for k, v in row.items() if not k.startswith("_")}

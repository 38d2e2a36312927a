"""What the console knows of the running triggerers and their groups, and how it
joins that with the broker's view.

A snapshot is the ``triggerer_process`` rows, each live one's ``/status`` and the
recorded groups (``stream_group``), taken at most once a second. A partition's lag
comes from the triggerer that owns it (log end minus its ledger's floor, so a held
message keeps its partition lagging) and, where no live triggerer reports one, from
the broker's committed offsets: with no triggerer running, or for a partition no
live member consumes. That last case is flagged at once (``unowned``): right after a
kill -9 the broker still counts the dead member until its session times out, but the
live members' reports already leave the partition out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sharedstream.ops.offsets import GroupPositions
from sharedstream.web.dbreads import json_list

Partition = tuple[str, int]

@dataclass(slots=True)
class ProcessView:
    """One ``triggerer_process`` row, whether it is alive, and its ``/status`` if fetched."""

    row: dict[str, Any]
    alive: bool
    seen_ago_s: float
    status: dict[str, Any] | None = None
    status_error: str | None = None


@dataclass(slots=True)
class LiveGroup:
    """One consumer group as the live triggerers' ``/status`` describe it: the members'
    group documents, each assigned partition with its owner, the held messages."""

    members: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    partitions: dict[tuple[str, int], tuple[str, dict[str, Any]]] = field(default_factory=dict)
    held: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    unreported: list[str] = field(default_factory=list)  # alive, lists it, no /status


@dataclass(slots=True)
class Snapshot:
    taken: float
    processes: list[ProcessView] = field(default_factory=list)
    error: str | None = None  # the database did not answer
    recorded: dict[str, dict[str, Any]] = field(default_factory=dict)  # stream_group
    # The lists built from it once (``listing.py``): a snapshot's data never changes.
    indexes: dict[str, Any] = field(default_factory=dict)


def triggerer_health(view: ProcessView) -> str:
    if not view.alive:
        return "stale"
    if view.row.get("status_url") is None:
        return "no_status"
    if view.status is None:
        return "unreachable"
    return "ok" if view.status.get("ready") else "not_ready"


def live_groups(snapshot: Snapshot) -> dict[str, LiveGroup]:
    """Per consumer group, what the live triggerers' ``/status`` say about it."""
    groups: dict[str, LiveGroup] = {}
    for view in snapshot.processes:
        if not view.alive:
            continue
        if view.status is None:  # it may own partitions: nobody can say which
            for name in json_list(view.row.get("groups")):
                groups.setdefault(name, LiveGroup()).unreported.append(view.row["id"])
            continue
        owner = view.row["id"]
        for doc in view.status.get("groups", []):
            live = groups.setdefault(str(doc.get("consumer_group")), LiveGroup())
            live.members.append((owner, doc))
            for part in doc.get("partitions", []):
                live.partitions[(str(part["topic"]), int(part["partition"]))] = (owner, part)
            live.held.extend((owner, held) for held in doc.get("held", []))
    return groups


def merged_lags(live: LiveGroup | None, positions: GroupPositions | None
                ) -> dict[Partition, tuple[int, str]]:
    """Each partition's lag and where it comes from: ``triggerer`` where its owner
    reports one, ``kafka`` (committed) for the others the broker knows."""
    found = {(p.topic, p.partition): (p.lag, "kafka")
             for p in (positions.partitions if positions else [])}
    for key, (_, part) in (live.partitions if live else {}).items():
        if isinstance(part.get("lag"), int):
            found[key] = (int(part["lag"]), "triggerer")
    return found


def lag_source(sources: Iterable[str]) -> str | None:
    """``triggerer``, ``kafka``, ``mixed``, or None for no lag at all."""
    found = set(sources)
    return None if not found else found.pop() if len(found) == 1 else "mixed"


def unowned(live: LiveGroup | None, positions: GroupPositions | None,
            topics: Sequence[str]) -> list[Partition]:
    """The partitions of ``topics`` that no answering member reports as assigned, when
    the group has answering members. A process that does not answer its ``/status``
    (``unreported``) may still consume them, but the usual cause is a kill -9: its row
    looks alive for 30 s and the broker keeps its assignment until its session times
    out, and both would hide the very partition that nobody consumes."""
    if live is None or not live.members or positions is None:
        return []
    wanted = set(topics)
    return sorted((p.topic, p.partition) for p in positions.partitions
                  if p.topic in wanted and (p.topic, p.partition) not in live.partitions)

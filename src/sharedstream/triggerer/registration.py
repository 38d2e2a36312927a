"""Start-up bookkeeping in the database: which assets exist, which watchers form each group.

Assets: every declared asset is created or reactivated; an asset that is in the
database but no longer declared is marked inactive with a timestamp (its state
is kept until an operator sweeps it), so renaming a watcher module never
silently deletes cursors.

Groups: each shared-stream group's declared watcher set is recorded. Several
triggerer processes with the same watcher module scale out by joining the same
consumer groups; a process whose set differs from the recorded one would split
a cohort (one process holding messages for a watcher the other never runs), so
it refuses to start unless the operator passes ``--takeover``, which records
the new set.

A watcher module whose topic set changed consumes as a new group (another key): its
row is new, so nothing is refused, and the old group's row stays. Those rows tell
which consumer groups a watcher read, and when (:func:`recorded_reads`: a group
continues each topic from the group its watchers read it in last), and which group
each watcher reads now (:func:`groups_in_use`: the one recorded last).
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import func, select

from sharedstream.statestore.models import asset, stream_group
from sharedstream.statestore.sql import upsert
from sharedstream.statestore.store import StateStore
from sharedstream.statestore.types import utcnow
from sharedstream.triggers.assets import Asset


class CohortMismatchError(RuntimeError):
    """The recorded watcher set of a group differs from this process's."""


@dataclass(frozen=True, slots=True)
class GroupDeclaration:
    """One shared-stream group as this process declares it."""

    key: Hashable
    consumer_group: str
    watchers: frozenset[str]

    @property
    def key_text(self) -> str:
        """The row's key: the shared-stream key and the Kafka consumer group, so that two
        deployments reading the same topics under their own ``group.id`` are two groups."""
        return group_key_text((*self.key, self.consumer_group) if isinstance(self.key, tuple)
                              else (self.key, self.consumer_group))


def group_key_text(key: Hashable) -> str:
    """A stable text form of a shared-stream key (tuples become JSON arrays)."""
    return json.dumps(key, default=_listify, separators=(",", ":"))


def _listify(value: object) -> object:
    if isinstance(value, tuple | frozenset | set):
        return list(value)
    return repr(value)


def register_assets(store: StateStore, assets: Iterable[Asset]) -> dict[str, int]:
    """Create/reactivate declared assets, deactivate the others; ``{asset name: id}``."""
    ids = {a.name: store.register_asset(a.name, a.uri) for a in assets}
    with store.engine.connect() as connection:
        active = connection.execute(
            select(asset.c.name).where(asset.c.active.is_(True))).scalars().all()
    for name in active:
        if name not in ids:
            store.deactivate_asset(name)
    return ids


def register_groups(store: StateStore, groups: Iterable[GroupDeclaration], *,
                    takeover: bool, dry_run: bool = False) -> None:
    """Record each group's watcher set; refuse a different recorded set unless ``takeover``.

    All groups are compared before any is written, so a refused start changes nothing;
    ``dry_run`` compares and writes nothing (``sharedstream check``).
    """
    declared = list(groups)
    with store.engine.begin() as connection:
        rows = connection.execute(
            select(stream_group.c.group_key, stream_group.c.watchers)
            .where(stream_group.c.group_key.in_([g.key_text for g in declared]))).all()
        recorded: Mapping[str, frozenset[str]] = {
            row.group_key: frozenset(json.loads(row.watchers)) for row in rows}
        problems = [_difference(g, recorded[g.key_text]) for g in declared
                    if g.key_text in recorded and recorded[g.key_text] != g.watchers]
        if problems and not takeover:
            raise CohortMismatchError(
                "; ".join(problems) + ". Another triggerer may still run the old watcher set; "
                "stop it, or start this one with --takeover to record the new set")
        if dry_run:
            return
        # Recorded after every earlier start, even one on a host whose clock runs ahead:
        # the order of the rows is where each watcher read last (recorded_reads).
        now = utcnow()
        newest = connection.execute(select(func.max(stream_group.c.updated_at))).scalar()
        if newest is not None and newest >= now:
            now = newest + timedelta(microseconds=1)
        for g in declared:
            upsert(connection, stream_group, [{
                "group_key": g.key_text, "consumer_group": g.consumer_group,
                "watchers": json.dumps(sorted(g.watchers)), "updated_at": now,
            }], conflict=("group_key",), update=("consumer_group", "watchers", "updated_at"))


def recorded_reads(store: StateStore) -> dict[str, dict[str, datetime]]:
    """Per recorded watcher, each consumer group it was recorded in and when last: where
    it read which topics, and in what order (a start records all its groups at one
    instant, so a watcher that moved has its old group's row older)."""
    with store.engine.connect() as connection:
        rows = connection.execute(select(stream_group.c.consumer_group, stream_group.c.watchers,
                                         stream_group.c.updated_at)).all()
    out: dict[str, dict[str, datetime]] = {}
    for row in rows:
        for watcher in json.loads(row.watchers):
            groups = out.setdefault(watcher, {})
            if row.consumer_group not in groups or row.updated_at > groups[row.consumer_group]:
                groups[row.consumer_group] = row.updated_at
    return out


def groups_in_use(store: StateStore) -> set[str]:
    """The consumer group(s) each recorded watcher was recorded in last, whichever module
    it belongs to."""
    return latest_groups(recorded_reads(store))


def latest_groups(reads: Mapping[str, Mapping[str, datetime]]) -> set[str]:
    """:func:`groups_in_use` from :func:`recorded_reads` (all of them on a tie)."""
    out: set[str] = set()
    for groups in reads.values():
        newest = max(groups.values())
        out |= {name for name, at in groups.items() if at == newest}
    return out


def _difference(group: GroupDeclaration, recorded: frozenset[str]) -> str:
    added = sorted(group.watchers - recorded)
    removed = sorted(recorded - group.watchers)
    parts = []
    if added:
        parts.append(f"adds {added}")
    if removed:
        parts.append(f"drops {removed}")
    return (f"group {group.consumer_group} ({group.key_text}): this process "
            + " and ".join(parts) + f" compared with the recorded set {sorted(recorded)}")

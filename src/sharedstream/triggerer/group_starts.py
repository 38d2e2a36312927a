"""Start-up: where each shared-stream group starts reading, said per topic, and groups
left behind (see :mod:`sharedstream.kafka.group_start` for the rules and their windows).

``run`` (:func:`start_groups`) plans, compares the watcher sets, copies the offsets and
only then records the sets, before any consumer subscribes (a conflict refuses the start
with nothing written); ``check`` plans and prints, changing nothing. The groups a group
may continue from are those the database recorded with one of its watchers, each topic
from the one they were recorded in last.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from sharedstream.kafka.connections import DEFAULT_GROUP_ID, client_config
from sharedstream.kafka.group_start import (
    GroupAdmin,
    GroupStart,
    delete_command,
    kafka_reason,
    left_behind,
    plan_start,
    source_groups,
)
from sharedstream.statestore.store import StateStore
from sharedstream.triggerer.plan import GroupPlan, StartupError, UnavailableError
from sharedstream.triggerer.registration import (
    CohortMismatchError,
    latest_groups,
    recorded_reads,
    register_groups,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StartReport:
    starts: tuple[tuple[GroupPlan, GroupStart], ...]
    left_behind: tuple[tuple[str, int], ...]  # (group, live members)

    def lines(self) -> list[str]:
        out = [f"group {plan.consumer_group}: {line}"
               for plan, start in self.starts for line in start.lines()]
        for group, members in self.left_behind:
            if members:
                out.append(f"left behind: {group} (no group of these watchers uses it, yet "
                           f"it has {members} live member(s): stop its triggerers, then "
                           f"`{delete_command(group)}` removes it)")
            else:
                out.append(f"left behind: {group} (no group of these watchers uses it; its "
                           f"lag grows for ever: `{delete_command(group)}` removes it)")
        return out

    def conflict(self) -> str | None:
        return next((c for _, s in self.starts if (c := s.conflict()) is not None), None)


def plan_starts(groups: Sequence[GroupPlan], reads: Mapping[str, Mapping[str, datetime]],
                timeout: float) -> StartReport:
    """Each Kafka group's start and the groups left behind; ``reads`` maps each recorded
    watcher to the consumer groups the database recorded it in, with when
    (:func:`~sharedstream.triggerer.registration.recorded_reads`). Nothing is changed."""
    starts: list[tuple[GroupPlan, GroupStart]] = []
    behind: dict[str, int] = {}
    latest = latest_groups(reads)
    current = {g.consumer_group for g in groups}
    for connection_id, members in _by_connection(groups).items():
        with _AdminSession(connection_id, members[0].connection, timeout) as admin:
            group_id = _group_id(members[0].connection)
            reset = str(members[0].connection.get("auto.offset.reset", "earliest"))
            for plan in members:
                own_reads = {w: reads[w] for w in plan.watchers if w in reads}
                related = {g for recorded in own_reads.values() for g in recorded}
                topics = plan.consumed_topics
                sources = source_groups(admin, group_id, plan.consumer_group, topics, related)
                _, live = admin.state(plan.consumer_group)
                start = plan_start(plan.consumer_group, admin.partitions(topics),
                                   admin.committed(plan.consumer_group), sources,
                                   reset=reset, live_members=live, reads=own_reads)
                starts.append((plan, start))
                current |= {g for p in start.partitions if p.reason == "copied"
                            for g, _ in p.sources}
            prefixed = {name: admin.committed(name) for name in admin.groups(f"{group_id}.")
                        if name not in current | latest}
            for name in left_behind(prefixed, latest, current):
                behind.setdefault(name, admin.state(name)[1])
    return StartReport(tuple(starts), tuple(sorted(behind.items())))


def apply_starts(report: StartReport, timeout: float) -> None:
    """Copy the planned offsets, each group in one commit; raises UnavailableError when
    the broker refuses (a process of the same group started meanwhile: start again)."""
    for plan, start in report.starts:
        copies = start.copies()
        if not copies or plan.connection_id is None:
            continue
        with _AdminSession(plan.connection_id, plan.connection, timeout) as admin:
            refused = admin.commit(plan.consumer_group, copies)
        if refused:
            raise UnavailableError(
                f"group {plan.consumer_group}: the broker refused the start offsets copied "
                f"from the groups it continues from ({'; '.join(refused)}); another "
                "triggerer of this group may have started meanwhile: start again")


def _by_connection(groups: Sequence[GroupPlan]) -> dict[str, list[GroupPlan]]:
    out: dict[str, list[GroupPlan]] = {}
    for plan in groups:
        if plan.connection_id is not None:
            out.setdefault(plan.connection_id, []).append(plan)
    return out


def _group_id(connection: Mapping[str, Any]) -> str:
    return str(connection.get("group.id") or DEFAULT_GROUP_ID)


class _AdminSession:
    """A :class:`GroupAdmin` released on this thread when the block ends, its Kafka
    failures as UnavailableError (exit 1) naming the connection."""

    def __init__(self, connection_id: str, connection: Mapping[str, Any],
                 timeout: float) -> None:
        self.connection_id = connection_id
        config = client_config(connection)
        config["error_cb"] = _ignore  # a failed request says why in one line instead
        self.admin = GroupAdmin(AdminClient(config), timeout)

    def __enter__(self) -> GroupAdmin:
        return self.admin

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        # A failure's traceback holds this frame: drop the client first, so no cycle keeps
        # it for the collector (which may run on a librdkafka thread).
        self.admin.admin = None
        if isinstance(exc, KafkaException | TimeoutError):
            reason = kafka_reason(exc) if isinstance(exc, KafkaException) else "timed out"
            raise UnavailableError(f"connection {self.connection_id!r}: reading consumer "
                                   f"group offsets failed ({reason})") from None


def _ignore(_error: KafkaError) -> None:
    """Connection errors surface as the failed request's error instead."""



def start_report(groups: Sequence[GroupPlan], store: StateStore | None,
                 timeout: float) -> StartReport:
    """:func:`plan_starts` with the reads the database recorded (none without a store);
    a conflict is a StartupError (exit 2) naming the groups and the fix."""
    report = plan_starts(groups, recorded_reads(store) if store is not None else {}, timeout)
    conflict = report.conflict()
    if conflict is not None:
        raise StartupError(conflict)
    return report


def start_groups(groups: Sequence[GroupPlan], store: StateStore, timeout: float, *,
                 takeover: bool) -> StartReport:
    """What ``run`` does before any consumer subscribes: plan, compare the watcher sets
    (a refused start changes nothing), copy the planned offsets, then record the sets.

    Copying before recording closes a crash window: a group recorded before its copy
    landed would be, at the next start, where its watchers read last, and its stale
    commits (a return to an earlier topic set) would win. Copied but not recorded, the
    next start finds the same source newest and copies again (its offsets, or further).
    """
    starts = start_report(groups, store, timeout)
    declarations = [g.declaration() for g in groups]
    try:
        register_groups(store, declarations, takeover=takeover, dry_run=True)
        apply_starts(starts, timeout)
        register_groups(store, declarations, takeover=takeover)
    except CohortMismatchError as exc:
        raise StartupError(str(exc)) from None
    log_report(starts)
    return starts


def log_report(report: StartReport) -> None:
    for line in report.lines():
        if line.startswith("left behind:"):
            log.warning("%s", line)
        else:
            log.info("%s", line)

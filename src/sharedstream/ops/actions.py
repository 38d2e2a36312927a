"""The four operator actions, shared by the console (``POST /api/v1/actions/...``) and
the CLI (``held retry``, ``dlq replay``, ``offsets reset``, ``triggerers forget``), and
the audit of each one.

One implementation each: the console calls these functions, and so do the commands
(``dlq replay`` and ``offsets reset`` through the same ``Replayer`` and
``plan_reset``/``apply_reset`` their commands run). Every action that would change
something, done or refused, writes one ``audit_entry`` row: who (``console:<token
name>`` or ``cli:<user>``), what, on what, when, and the result in one line. Previews
(dry runs) change nothing and are not recorded.

Retrying a held message: the message lives in the memory of the triggerer that holds
it, so the request goes to that process through the database. The action reads who
holds it now from the live triggerers' ``/status`` (refused when nobody does), and
writes a ``held_retry`` row addressed to that triggerer; the triggerer takes its rows
at its next heartbeat (within 5 s) and hands the message out at once, or logs that it
is not held any more (resolved meanwhile). No write path is opened on the triggerers'
health servers, and the console needs no route to them beyond ``/status``.
"""

from __future__ import annotations

import getpass
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from sqlalchemy import delete, insert, select

from sharedstream.ops.audit import audit_list as audit_list
from sharedstream.ops.clitools import CommandError, stamp
from sharedstream.ops.dlq.reader import DeadLetterError
from sharedstream.ops.dlq.replay import (
    Replayer,
    ReplayRules,
    ReplaySummary,
    default_group,
    default_parking_topic,
)
from sharedstream.ops.offsets import (
    GroupOffsets,
    ResetChange,
    ResetTarget,
    apply_reset,
    plan_reset,
)
from sharedstream.statestore.models import audit_entry, held_retry, triggerer_process
from sharedstream.statestore.store import StateStore
from sharedstream.statestore.types import utcnow
from sharedstream.triggerer.heartbeat import STALE_AFTER_S

T = TypeVar("T")
HELD_RETRY = "held retry"
DLQ_REPLAY = "dlq replay"
OFFSETS_RESET = "offsets reset"
TRIGGERER_FORGET = "triggerers forget"
ACTIONS = (HELD_RETRY, DLQ_REPLAY, OFFSETS_RESET, TRIGGERER_FORGET)
RESULT_CHARS = 1000


def cli_actor() -> str:
    """Who a CLI action is by, for the audit."""
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):  # no user name for this uid (a container)
        return "cli:unknown"


def record(store: StateStore, actor: str, action: str, target: str, ok: bool,
           result: str) -> None:
    """One audit row (the result cut to :data:`RESULT_CHARS`)."""
    with store.engine.begin() as connection:
        connection.execute(insert(audit_entry).values(
            at=utcnow(), actor=actor, action=action, target=target, ok=ok,
            result=result[:RESULT_CHARS]))


def audited(store: StateStore, actor: str, action: str, target: str,
            run: Callable[[], T], describe: Callable[[T], str] = str) -> T:
    """``run()``, recorded with ``describe(value)`` as its result; a refusal or failure
    (:class:`CommandError`, :class:`DeadLetterError`) is recorded with its reason and
    raised again."""
    try:
        value = run()
    except (CommandError, DeadLetterError) as exc:
        record(store, actor, action, target, False, f"refused: {exc}")
        raise
    record(store, actor, action, target, True, describe(value))
    return value


# -- retry a held message -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HeldMessage:
    consumer_group: str
    topic: str
    partition: int
    offset: int

    def __str__(self) -> str:
        return f"{self.consumer_group} {self.topic}[{self.partition}]@{self.offset}"


def request_retry(store: StateStore, message: HeldMessage, holders: Sequence[str]) -> str:
    """Ask the live triggerers ``holders`` (those whose ``/status`` lists ``message`` as
    held now) to hand it out again; refused when there is none."""
    if not holders:
        raise CommandError(f"{message} is not held by any live triggerer (resolved, being "
                           "attempted right now, or its triggerer is gone): nothing to retry")
    with store.engine.begin() as connection:
        connection.execute(insert(held_retry), [
            {"triggerer_id": holder, "consumer_group": message.consumer_group,
             "topic": message.topic, "partition": message.partition,
             "offset": message.offset, "requested_at": utcnow()} for holder in holders])
    return (f"retry requested from triggerer {', '.join(holders)} (taken at its next "
            "heartbeat, within 5 s)")


# -- forget a stale triggerer ---------------------------------------------------------


def forget_triggerer(store: StateStore, triggerer_id: str) -> str:
    """Delete a stale triggerer's row (a killed process's: a clean stop deletes its own)
    and the retry requests addressed to it; refused for a live one, which would write
    its row again at its next heartbeat anyway."""
    p = triggerer_process.c
    with store.engine.begin() as connection:
        row = connection.execute(select(p.host, p.pid, p.last_seen)
                                 .where(p.id == triggerer_id)).first()
        if row is None:
            raise CommandError(f"no triggerer {triggerer_id!r} (already forgotten, or "
                               "stopped cleanly)")
        seen_ago = (utcnow() - row.last_seen).total_seconds()
        if seen_ago <= STALE_AFTER_S:
            raise CommandError(
                f"triggerer {triggerer_id} ({row.host} pid {row.pid}) is alive (seen "
                f"{seen_ago:.0f} s ago): stop it, or wait until it is not seen for "
                f"{STALE_AFTER_S:.0f} s")
        connection.execute(delete(triggerer_process).where(p.id == triggerer_id))
        connection.execute(delete(held_retry).where(held_retry.c.triggerer_id == triggerer_id))
    return (f"forgot {row.host} pid {row.pid} (last seen {stamp(row.last_seen)}, "
            f"{timedelta(seconds=round(seen_ago))} ago)")


# -- replay dead letters --------------------------------------------------------------


def replay_dead_letters(connection: Mapping[str, Any], topic: str, *,
                        watchers: Sequence[str] = (), reasons: Sequence[str] = (),
                        group: str | None = None, from_start: bool = False,
                        dry_run: bool, timeout: float = 10.0) -> ReplaySummary:
    """``dlq replay TOPIC --watcher ... --reason ... [--group G] [--from-start]
    [--dry-run]`` with its defaults (replay topic, parking topic, the replay group)."""
    rules = ReplayRules(parking_topic=default_parking_topic(topic),
                        watchers=frozenset(watchers), reasons=tuple(reasons))
    return Replayer(connection, topic, rules, group=group or default_group(topic),
                    dry_run=dry_run, timeout=timeout, from_start=from_start).run()


def replay_target(topic: str, *, watchers: Sequence[str] = (), reasons: Sequence[str] = (),
                  group: str | None = None, from_start: bool = False) -> str:
    """What a replay is on, as the audit records it: the command's arguments."""
    return (topic + "".join(f" --watcher {w}" for w in watchers)
            + "".join(f" --reason {r}" for r in reasons)
            + (f" --group {group}" if group else "") + (" --from-start" if from_start else ""))


def replay_line(summary: ReplaySummary) -> str:
    """The replay's one line: which group from where, then what it (would) do."""
    counts = summary.as_dict()
    verb = "would be " if summary.dry_run else ""
    start = "the start of the topic" if summary.from_start else "where it stopped"
    return (f"group {summary.group} from {start}: examined {summary.examined}: "
            f"{verb}replayed {counts['replayed']}, {verb}parked {counts['parked']}, "
            f"filtered out {counts['filtered_out']}, skipped duplicates "
            f"{counts['skipped_duplicates']}, foreign {counts['foreign']}")


# -- reset a group's offsets ----------------------------------------------------------


def reset_offsets(connection: Mapping[str, Any], group: str, target: ResetTarget, *,
                  dry_run: bool, timeout: float = 10.0) -> list[ResetChange]:
    """``offsets reset --group GROUP --to TARGET [--dry-run]``: refused while the group
    has live members (checked again at every call: a preview proves nothing later)."""
    with GroupOffsets(connection, group, timeout) as offsets:
        changes = plan_reset(offsets, target)
        if not dry_run:
            apply_reset(offsets, changes)
    return changes


def reset_line(changes: Sequence[ResetChange]) -> str:
    moved = ", ".join(f"{c.topic}[{c.partition}] {'-' if c.before is None else c.before}"
                      f"->{c.after}" for c in changes[:20])
    more = f" and {len(changes) - 20} more" if len(changes) > 20 else ""
    return f"reset {len(changes)} partition(s): {moved}{more}"

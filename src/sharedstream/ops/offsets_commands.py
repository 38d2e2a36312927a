"""``sharedstream offsets show|reset|delete``: a shared-stream consumer group's position,
deliberate reprocessing, and removing a group left behind by a topic-set change.

Exit codes: 0 ok, 1 runtime failure (broker unreachable, group or topic missing, live
members), 2 usage or configuration error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import click

from sharedstream.kafka.connections import DEFAULT_GROUP_ID
from sharedstream.kafka.group_start import delete_command
from sharedstream.ops.clitools import (
    CommandError,
    console,
    database_options,
    emit_json,
    handled,
    kafka_connection,
    kafka_connection_option,
    open_store,
    option_value,
)
from sharedstream.ops.offsets import (
    GroupOffsets,
    GroupPositions,
    ResetChange,
    apply_reset,
    format_ranges,
    idle_committed,
    left_behind_of,
    parse_reset_target,
    plan_reset,
    show,
    show_all,
)
from sharedstream.statestore.durations import utcnow

if TYPE_CHECKING:
    from rich.table import Table

P = ParamSpec("P")
R = TypeVar("R")

REPROCESSING_NOTE = (
    "Events are idempotent per (watcher, topic id, partition, offset, index): re-reading "
    "offsets creates no new events unless those events were deleted. To reprocess "
    "deliberately: stop the triggerers of the group, delete the events you want recreated "
    "(sharedstream events clean), reset the offsets, start the triggerers again.")


def _group_options(fn: Callable[P, R]) -> Callable[P, R]:
    fn = click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=10.0,
                      show_default=True, help="Seconds to wait for each broker request.")(fn)
    fn = database_options(fn)
    fn = kafka_connection_option(fn)
    fn = click.option("--watcher", metavar="W",
                      help="Instead of --group: the group of watcher W, as recorded in the "
                           "database by the triggerer.")(fn)
    return click.option("--group", metavar="GROUP",
                        help="Kafka consumer group (<group.id>.<topics joined by +>, as the "
                             "triggerer prints at start-up).")(fn)


def _group_name(ctx: click.Context, group: str | None, watcher: str | None) -> str:
    """``--group``, or the consumer group recorded for ``--watcher`` in ``stream_group``."""
    if (group is None) == (watcher is None):
        raise click.UsageError("give exactly one of --group GROUP or --watcher W")
    if group is not None:
        return group
    assert watcher is not None  # exactly one of the two was given
    from sharedstream.triggerer.registration import recorded_reads

    recorded = recorded_reads(open_store(ctx)).get(watcher, {})
    found = sorted(((at, name) for name, at in recorded.items()), reverse=True)
    if not found:
        raise CommandError(f"watcher {watcher!r} is in no recorded group (groups are recorded "
                           "when `sharedstream run` starts)")
    # A watcher whose topic set changed is recorded in its old group too: the row written
    # last is the group it reads now.
    if len(found) > 1 and found[0][0] == found[1][0]:
        raise CommandError(f"watcher {watcher!r} is recorded in several groups at once: "
                           f"{', '.join(sorted(g for _, g in found))}; give --group")
    return str(found[0][1])


def _offsets(ctx: click.Context, group: str | None, watcher: str | None,
             timeout: float) -> GroupOffsets:
    connection = kafka_connection(ctx)
    return GroupOffsets(connection, _group_name(ctx, group, watcher), timeout)


def positions_table(positions: GroupPositions) -> Table:
    from rich.table import Table

    table = Table(title=f"{positions.group}: {positions.state}, "
                        f"{positions.live_members} live member(s)")
    for column in ("topic", "partition", "committed", "remembered above", "log end", "lag"):
        table.add_column(column, justify="left" if column == "topic" else "right")
    for p in positions.partitions:
        remembered = (f"{format_ranges(p.remembered)} ({len(p.remembered)})"
                      if p.remembered else "-")
        table.add_row(p.topic, str(p.partition), "-" if p.committed is None else str(p.committed),
                      remembered, str(p.log_end), str(p.lag))
    return table


@click.group("offsets", epilog=REPROCESSING_NOTE)
def offsets_group() -> None:
    """Committed offsets of shared-stream consumer groups."""


@offsets_group.command("show")
@_group_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
@handled
def offsets_show(ctx: click.Context, /, group: str | None, watcher: str | None,
                 timeout: float, as_json: bool, **_: Any) -> None:
    """Per partition: committed offset, remembered progress above it, log end, lag; and
    whether the group has live members. Without --group or --watcher: every group of the
    connection (named <group.id>.<topics>), and which are left behind."""
    if group is None and watcher is None:
        _show_every_group(ctx, timeout, as_json)
        return
    with _offsets(ctx, group, watcher, timeout) as offsets:
        positions = show(offsets)
        in_use, note = _groups_in_use(ctx)
        behind = offsets.left_behind(in_use)
    if as_json:
        emit_json({**_positions_json(positions),
                   "left_behind": [asdict(b) for b in behind]})
        return
    console.print(positions_table(positions))
    for b in behind:
        live = f", {b.live_members} live member(s)" if b.live_members else ""
        console.print(f"left behind: {b.group} (no group in use reads with it{live}; its lag "
                      f"grows for ever): remove it with `{b.command}`", soft_wrap=True)
    if note:
        console.print(note, soft_wrap=True)


def _show_every_group(ctx: click.Context, timeout: float, as_json: bool) -> None:
    """``offsets show`` alone: every shared-stream group of the connection. Which are left
    behind needs the database's records; without them none is called so."""
    connection = kafka_connection(ctx)
    with GroupOffsets(connection, "", timeout) as offsets:
        shown = show_all(offsets)
    in_use, note = _groups_in_use(ctx)
    if note:
        note = ("note: no database to tell which groups the triggerers use (give --config "
                "or --database-url): none is called left behind")
    behind = set() if note else left_behind_of(shown, in_use)
    if as_json:
        emit_json({"groups": [_positions_json(p) | {"left_behind": p.group in behind}
                              for p in shown], "note": note})
        return
    if not shown:
        prefix = f"{connection.get('group.id') or DEFAULT_GROUP_ID}."
        console.print(f"no consumer group named {prefix}<topics> on this connection",
                      soft_wrap=True)
    for positions in shown:
        console.print(positions_table(positions))
        if positions.group in behind:
            console.print(f"left behind: {positions.group} (no group in use reads with it; "
                          f"its lag grows for ever): remove it with "
                          f"`{delete_command(positions.group)}`", soft_wrap=True)
    if note:
        console.print(note, soft_wrap=True)


def _positions_json(positions: GroupPositions) -> dict[str, Any]:
    return {"group": positions.group, "state": positions.state,
            "live_members": positions.live_members,
            "partitions": [asdict(p) | {"lag": p.lag} for p in positions.partitions]}


def _groups_in_use(ctx: click.Context) -> tuple[set[str], str | None]:
    """The groups the database records as read now (each watcher's latest group), and a
    note when it cannot say: then every other group with committed offsets is listed."""
    from sqlalchemy.exc import SQLAlchemyError

    from sharedstream.statestore.engine import DatabaseURLError
    from sharedstream.triggerer.registration import groups_in_use

    try:
        return groups_in_use(open_store(ctx)), None
    except (CommandError, SQLAlchemyError, DatabaseURLError, OSError):
        return set(), ("note: no database to tell which groups the triggerers use (give "
                       "--config or --database-url): every other group of this connection "
                       "with committed offsets is listed")


def changes_table(group: str, changes: list[ResetChange], title: str) -> Table:
    from rich.table import Table

    table = Table(title=f"{group}: {title}")
    for column in ("topic", "partition", "committed before", "remembered before", "after"):
        table.add_column(column, justify="left" if column == "topic" else "right")
    for c in changes:
        table.add_row(c.topic, str(c.partition), "-" if c.before is None else str(c.before),
                      str(c.remembered_before), str(c.after))
    return table


@offsets_group.command("reset", epilog=REPROCESSING_NOTE)
@_group_options
@click.option("--to", "to", required=True, metavar="earliest|latest|TIME",
              help="Where to move: the log start, the log end, or the first offset at or "
                   "after TIME (ISO-8601, naive = UTC; or a duration ago such as 2h).")
@click.option("--topic", metavar="T", help="Only this topic of the group.")
@click.option("--partition", type=click.IntRange(min=0), metavar="P",
              help="Only this partition (needs --topic).")
@click.option("--dry-run", is_flag=True, help="Show the change, make none.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
@handled
def offsets_reset(ctx: click.Context, /, group: str | None, watcher: str | None,
                  timeout: float, to: str, topic: str | None, partition: int | None,
                  dry_run: bool, yes: bool, as_json: bool, **_: Any) -> None:
    """Move the committed offsets of a group for deliberate reprocessing.

    Refused while the group has live members (stop its triggerers first). Clears the
    remembered progress (commit metadata) of every partition it resets.
    """
    if partition is not None and topic is None:
        raise click.UsageError("--partition needs --topic")
    target = option_value("--to", lambda text: parse_reset_target(text, utcnow()), to)
    with _offsets(ctx, group, watcher, timeout) as offsets:
        changes = plan_reset(offsets, target, topic, partition)
        if not as_json:
            console.print(changes_table(offsets.group, changes,
                                        "dry run, nothing changed" if dry_run else "reset"))
        if not dry_run:
            if not yes:
                click.confirm(f"Reset {len(changes)} partition(s) of {offsets.group}?",
                              abort=True, err=True)
            apply_reset(offsets, changes)
    if as_json:
        emit_json({"group": offsets.group, "to": to, "dry_run": dry_run,
                   "partitions": [asdict(c) for c in changes]})
    elif not dry_run:
        console.print(f"reset {len(changes)} partition(s); remembered progress cleared")


@offsets_group.command("delete")
@click.option("--group", metavar="GROUP", required=True,
              help="Kafka consumer group to delete, e.g. one `offsets show` or `check` "
                   "reports as left behind.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=10.0,
              show_default=True, help="Seconds to wait for each broker request.")
@database_options
@kafka_connection_option
@click.option("--dry-run", is_flag=True, help="Show what would be deleted, delete nothing.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
@handled
def offsets_delete(ctx: click.Context, /, group: str, timeout: float, dry_run: bool,
                   yes: bool, as_json: bool, **_: Any) -> None:
    """Delete a consumer group and its committed offsets.

    For a group left behind when a watcher module's topic set changed: nothing reads it,
    and its lag grows for ever. Refused while the group has live members. A triggerer
    that starts on the group again starts it as a new group: each topic continues from
    another group of its watchers, else from auto.offset.reset.
    """
    with GroupOffsets(kafka_connection(ctx), group, timeout) as offsets:
        committed = idle_committed(offsets, "delete it")
        if not as_json:
            console.print(f"{group}: {len(committed)} committed partition(s) "
                          + ("(dry run, nothing deleted)" if dry_run else "to delete"),
                          soft_wrap=True)
        if not dry_run:
            if not yes:
                click.confirm(f"Delete consumer group {group} and its committed offsets?",
                              abort=True, err=True)
            offsets.delete()
    if as_json:
        emit_json({"group": group, "dry_run": dry_run, "deleted": not dry_run,
                   "partitions": len(committed)})
    elif not dry_run:
        console.print(f"deleted consumer group {group}", soft_wrap=True)

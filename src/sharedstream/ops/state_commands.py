"""``sharedstream db ...`` and ``sharedstream state-store ...`` commands.

Exit codes: 0 ok, 1 runtime failure (database, missing key, ...), 2 usage or config error.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from datetime import timedelta
from typing import Any, ParamSpec, TypeVar

import click
from rich.table import Table

from sharedstream.ops.clitools import (
    console,
    emit_json,
    fail,
    open_store,
    option_value,
    stamp,
    store_command,
)
from sharedstream.statestore.accessors import AssetState, TaskState
from sharedstream.statestore.durations import parse_duration
from sharedstream.statestore.retention import NEVER_EXPIRE
from sharedstream.statestore.scopes import AssetScope, TaskScope, Writer
from sharedstream.statestore.store import StateStore

P = ParamSpec("P")
R = TypeVar("R")


def _scope_options(fn: Callable[P, R]) -> Callable[P, R]:
    for decorator in reversed([
        click.option("--asset", "asset_name", metavar="NAME", help="Asset state of NAME."),
        click.option("--dag-id", metavar="ID", help="Task state: the DAG's id."),
        click.option("--run-id", metavar="ID", help="Task state: the DAG run's id."),
        click.option("--task-id", metavar="ID", help="Task state: the task's id."),
        click.option("--map-index", type=int, default=-1, show_default=True,
                     help="Task state: the mapped task's index (-1: not mapped)."),
    ]):
        fn = decorator(fn)
    return fn


def _accessor(store: StateStore, params: dict[str, Any]) -> TaskState | AssetState:
    task_parts = [params["dag_id"], params["run_id"], params["task_id"]]
    if params["asset_name"] is not None:
        if any(part is not None for part in task_parts):
            raise click.UsageError("give --asset or --dag-id/--run-id/--task-id, not both")
        return store.asset(AssetScope(name=params["asset_name"]), writer=Writer.api("cli"))
    if any(part is None for part in task_parts):
        raise click.UsageError("give --asset NAME, or all of --dag-id, --run-id, --task-id")
    dag_id, run_id, task_id = task_parts
    return store.task(TaskScope(dag_id, run_id, task_id, params["map_index"]))


def _scope_label(accessor: TaskState | AssetState) -> str:
    kind = "asset" if isinstance(accessor, AssetState) else "task"
    return f"{kind} {accessor.scope.label()}"


@click.group("state-store")
def state_store_group() -> None:
    """Task and asset state stores."""


@state_store_group.command("get")
@click.argument("key")
@_scope_options
@store_command()
def ss_get(ctx: click.Context, /, key: str, as_json: bool, **_: Any) -> None:
    """Print the value of KEY."""
    accessor = _accessor(open_store(ctx), ctx.params)
    missing = object()
    value = accessor.get(key, missing)
    if value is missing:
        raise fail(f"{key!r} not found in {_scope_label(accessor)}", 1)
    if as_json:
        emit_json({"key": key, "value": value})
    else:
        click.echo(json.dumps(value, ensure_ascii=False))


@state_store_group.command("set")
@click.argument("key")
@click.argument("value")
@_scope_options
@click.option("--retention", metavar="DURATION|never",
              help="Task state only: 7d, 12h, ... or 'never'; default [state_store].")
@store_command()
def ss_set(ctx: click.Context, /, key: str, value: str, retention: str | None, as_json: bool,
           **_: Any) -> None:
    """Set KEY to VALUE (a JSON document: 42, '"text"', '[1,2]', '{"a":1}')."""
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="VALUE") from None
    if parsed is None:
        raise click.BadParameter(
            f"null is not a storable value; to remove {key!r}, run "
            f"`sharedstream state-store delete {key}` with the same scope options",
            param_hint="VALUE")
    accessor = _accessor(open_store(ctx), ctx.params)
    if isinstance(accessor, TaskState):
        keep: object = None
        if retention is not None:
            keep = NEVER_EXPIRE if retention == "never" else option_value(
                "--retention", parse_duration, retention)
        accessor.set(key, parsed, retention=keep)
    else:
        if retention is not None:
            raise click.UsageError("--retention applies to task state only")
        accessor.set(key, parsed)
    if as_json:
        emit_json({"key": key, "value": parsed, "scope": _scope_label(accessor)})
    else:
        console.print(f"set {key!r} in {_scope_label(accessor)}")


@state_store_group.command("delete")
@click.argument("key")
@_scope_options
@store_command()
def ss_delete(ctx: click.Context, /, key: str, as_json: bool, **_: Any) -> None:
    """Delete KEY (exit 1 if it did not exist)."""
    accessor = _accessor(open_store(ctx), ctx.params)
    existed = accessor.delete(key)
    if as_json:
        emit_json({"key": key, "deleted": existed})
    elif existed:
        console.print(f"deleted {key!r} from {_scope_label(accessor)}")
    if not existed:
        raise fail(f"{key!r} not found in {_scope_label(accessor)}", 1)


@state_store_group.command("list")
@_scope_options
@store_command()
def ss_list(ctx: click.Context, /, as_json: bool, **_: Any) -> None:
    """List the keys of one scope."""
    accessor = _accessor(open_store(ctx), ctx.params)
    entries = accessor.items()
    if as_json:
        emit_json([asdict(entry) for entry in entries])
        return
    table = Table(title=_scope_label(accessor))
    for column in ("key", "value", "bytes", "updated_at", "expires_at / writer"):
        table.add_column(column)
    for entry in entries:
        extra = (f"{entry.writer_kind}:{entry.writer_id}" if entry.writer_kind
                 else str(entry.expires_at or "never"))
        shown = json.dumps(entry.value, ensure_ascii=False)
        table.add_row(entry.key, shown if len(shown) <= 60 else shown[:57] + "...",
                      str(entry.size), stamp(entry.updated_at), extra)
    console.print(table)


@state_store_group.command("stats")
@store_command()
def ss_stats(ctx: click.Context, /, as_json: bool, **_: Any) -> None:
    """Row counts per store, expired rows not yet cleaned, value size distribution."""
    data = open_store(ctx).stats()
    if as_json:
        emit_json(data)
        return
    table = Table(title="state stores")
    table.add_column("store")
    table.add_column("rows", justify="right")
    table.add_column("expired (not cleaned)", justify="right")
    table.add_column("bytes min/avg/max")
    table.add_column("size buckets")
    for name in ("task_state_store", "asset_state_store"):
        part = data[name]
        sizes = part["sizes"]
        table.add_row(name, str(part["rows"]), str(part.get("expired_not_deleted", "-")),
                      f"{sizes['min_bytes']}/{sizes['avg_bytes']}/{sizes['max_bytes']}",
                      "  ".join(f"{k}: {v}" for k, v in sizes["buckets"].items()))
    console.print(table)
    console.print(f"assets active {data['assets']['active']}, inactive "
                  f"{data['assets']['inactive']}; asset events {data['asset_events']}; "
                  f"rejected messages {data['rejected_messages']}")


@state_store_group.command("clean")
@click.option("--dry-run", is_flag=True, help="Count what would be deleted.")
@click.option("--batch-size", type=click.IntRange(min=0),
              help="Override [state_store] state_cleanup_batch_size (0 = one statement).")
@store_command()
def ss_clean(ctx: click.Context, /, dry_run: bool, batch_size: int | None, as_json: bool,
             **_: Any) -> None:
    """Delete expired task state rows (asset state is never touched)."""
    report = open_store(ctx).cleanup(dry_run=dry_run, batch_size=batch_size)
    if as_json:
        emit_json(asdict(report))
    elif report.skipped:
        console.print(report.skipped)
    else:
        verb = "would delete" if dry_run else "deleted"
        console.print(f"{verb} {report.rows} expired rows in {report.batches} batches "
                      f"({report.seconds:.3f}s)")


@state_store_group.command("orphans")
@click.option("--delete", "delete_them", is_flag=True, help="Delete the orphaned objects.")
@click.option("--min-age", default="1m", show_default=True, metavar="DURATION",
              help="Ignore objects younger than this (a set may be about to reference them).")
@store_command()
def ss_orphans(ctx: click.Context, /, delete_them: bool, min_age: str, as_json: bool,
               **_: Any) -> None:
    """List ([workers] state_backend) payload objects no row references."""
    age = option_value("--min-age", parse_duration, min_age)
    report = open_store(ctx).orphans(delete=delete_them, min_age=age)
    if as_json:
        emit_json({"orphans": [asdict(o) for o in report.orphans], "deleted": report.deleted})
        return
    table = Table(title=f"orphaned payloads ({len(report.orphans)})")
    for column in ("ref", "bytes", "modified_at"):
        table.add_column(column)
    for o in report.orphans:
        table.add_row(o.ref, str(o.size), stamp(o.modified_at))
    console.print(table)
    if delete_them:
        console.print(f"deleted {report.deleted}")


@state_store_group.command("sweep")
@click.option("--inactive-for", required=True, metavar="DURATION",
              help="Remove state of assets inactive at least this long (e.g. 30d).")
@click.option("--dry-run", is_flag=True, help="Count what would be removed; remove nothing.")
@store_command()
def ss_sweep(ctx: click.Context, /, inactive_for: str, dry_run: bool, as_json: bool,
             **_: Any) -> None:
    """Remove asset state of assets deactivated longer than --inactive-for."""
    grace: timedelta = option_value("--inactive-for", parse_duration, inactive_for)
    report = open_store(ctx).sweep(grace, dry_run=dry_run)
    if as_json:
        emit_json(asdict(report))
    else:
        verb = "would remove" if dry_run else "removed"
        names = ", ".join(report.assets) or "none"
        console.print(f"{verb} {report.rows} state rows of inactive assets: {names}")

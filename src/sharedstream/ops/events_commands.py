"""``sharedstream events list|clean``: look at and prune the asset events watchers persisted.

Exit codes: 0 ok, 1 runtime failure (database), 2 usage or configuration error.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import click
from rich.table import Table

from sharedstream.ops.clitools import (
    console,
    emit_json,
    open_store,
    store_command,
)
from sharedstream.statestore.durations import parse_duration, parse_instant
from sharedstream.statestore.events import EventRecord, clean_events, list_events
from sharedstream.statestore.types import utcnow

PREVIEW_CHARS = 60


def payload_preview(payload: Any, width: int = PREVIEW_CHARS) -> str:
    """The payload as compact JSON, cut to ``width`` characters with an ellipsis."""
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= width else text[: width - 3] + "..."


def events_table(events: list[EventRecord]) -> Table:
    table = Table(title=f"asset events ({len(events)}, newest first)")
    for column in ("asset", "watcher", "source", "index", "created_at", "payload"):
        table.add_column(column, overflow="fold")
    for event in events:
        table.add_row(event.asset, event.watcher,
                      f"{event.origin.topic}[{event.origin.partition}]@{event.origin.offset}",
                      str(event.event_index), event.created_at.isoformat(),
                      payload_preview(event.payload))
    return table


@click.group("events")
def events_group() -> None:
    """Asset events persisted by the watchers.

    Events are idempotent per (watcher, topic id, partition, offset, index): re-reading
    offsets (see `sharedstream offsets reset`) creates events only where they were deleted.
    """


@events_group.command("list")
@click.option("--asset", "asset_name", metavar="NAME", help="Only events of this asset.")
@click.option("--watcher", metavar="W", help="Only events of this watcher.")
@click.option("--since", metavar="TIME",
              help="Only events created at or after TIME: ISO-8601 (naive = UTC) or a "
                   "duration ago (10m, 2h, 7d).")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True)
@store_command(json_help="Print JSON (full payloads).")
def events_list(ctx: click.Context, /, asset_name: str | None, watcher: str | None,
                since: str | None, limit: int, as_json: bool, **_: Any) -> None:
    """List asset events, newest first."""
    start = None
    if since is not None:
        try:
            start = parse_instant(since, utcnow())
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--since") from None
    events = list_events(open_store(ctx).engine, asset_name=asset_name, watcher=watcher,
                         since=start, limit=limit)
    if as_json:
        emit_json([event.as_json() for event in events])
    else:
        console.print(events_table(events))


@events_group.command("clean")
@click.option("--older-than", required=True, metavar="DURATION",
              help="Delete events created longer ago than this (e.g. 30d, 12h).")
@click.option("--dry-run", is_flag=True, help="Count what would be deleted.")
@click.option("--batch-size", type=click.IntRange(min=0),
              help="Override [state_store] state_cleanup_batch_size (0 = one statement).")
@store_command()
def events_clean(ctx: click.Context, /, older_than: str, dry_run: bool,
                 batch_size: int | None, as_json: bool, **_: Any) -> None:
    """Delete asset events older than --older-than, one transaction per batch.

    Deleted events are created again if their offsets are ever re-read (after
    `sharedstream offsets reset`); that is how to reprocess deliberately.
    """
    try:
        age = parse_duration(older_than)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--older-than") from None
    store = open_store(ctx)
    size = store.settings.state_cleanup_batch_size if batch_size is None else batch_size
    report = clean_events(store.engine, now=store.clock(), older_than=age, batch_size=size,
                          dry_run=dry_run)
    if as_json:
        emit_json(asdict(report))
    else:
        verb = "would delete" if dry_run else "deleted"
        console.print(f"{verb} {report.rows} asset events older than {older_than} in "
                      f"{report.batches} batches ({report.seconds:.3f}s)")

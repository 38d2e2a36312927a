"""What ``sharedstream dlq replay`` shows while it runs and when it is done: a progress bar
on a terminal (a plain line every few seconds otherwise), then the summary table.

Apart from the commands so that ``dlq inspect`` never loads rich's progress machinery.
"""

from __future__ import annotations

import time
from typing import Any

import click
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from sharedstream.ops.clitools import console
from sharedstream.ops.dlq.replay import Action, ReplaySummary


class ProgressView:
    """A rich progress bar on a terminal; a plain line every few seconds otherwise."""

    PLAIN_EVERY = 2.0

    def __init__(self, enabled: bool, dry_run: bool = False) -> None:
        self._verb = "would replay" if dry_run else "replayed"
        self._bar: Progress | None = None
        self._task: TaskID | None = None
        self._last_plain = 0.0
        self._started = time.monotonic()
        self._enabled = enabled
        if enabled and console.is_terminal:
            self._bar = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(),
                TextColumn("{task.completed}/{task.total}"),
                TextColumn(self._verb + " {task.fields[replayed]} · parked "
                           "{task.fields[parked]} · duplicates {task.fields[duplicates]}"),
                TextColumn("{task.fields[rate]:.0f} rec/s"), TimeElapsedColumn(),
                console=console)

    def __enter__(self) -> ProgressView:
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(self, *_: object) -> None:
        if self._bar is not None:
            self._bar.stop()

    def update(self, summary: ReplaySummary, total: int) -> None:
        if not self._enabled:
            return
        rate = summary.examined / max(time.monotonic() - self._started, 1e-6)
        fields: dict[str, Any] = {"replayed": summary.counts[Action.REPLAY],
                  "parked": summary.counts[Action.PARK],
                  "duplicates": summary.counts[Action.DUPLICATE], "rate": rate}
        if self._bar is not None:
            if self._task is None:
                self._task = self._bar.add_task("replay", total=total, **fields)
            self._bar.update(self._task, completed=summary.examined, **fields)
            return
        now = time.monotonic()
        if now - self._last_plain >= self.PLAIN_EVERY or summary.examined >= total:
            self._last_plain = now
            click.echo(f"{summary.examined}/{total} examined, {self._verb} {fields['replayed']}, "
                       f"{fields['parked']} parked, {fields['duplicates']} duplicates, "
                       f"{rate:.0f} rec/s", err=True)


def summary_table(summary: ReplaySummary) -> Table:
    verb = "would be " if summary.dry_run else ""
    table = Table(title=f"{summary.topic} (group {summary.group})"
                        + (": dry run, nothing written" if summary.dry_run else ""))
    table.add_column("records")
    table.add_column("count", justify="right")
    table.add_row("examined", str(summary.examined))
    for action in Action:
        label = action.value if action not in (Action.REPLAY, Action.PARK) \
            else verb + action.value
        table.add_row(label, str(summary.counts[action]))
    return table

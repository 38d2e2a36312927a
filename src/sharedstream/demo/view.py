"""The demo's terminal output: a live view on a terminal, plain lines elsewhere.

On a terminal the view is redrawn in place (``rich.live.Live``, four times a
second). Without one (CI logs, pipes) a redrawn view would be unreadable, so a
plain line is printed every couple of seconds and whenever something notable
happens: a dead letter, the outage starting, the database answering again.
"""

from __future__ import annotations

import shlex
from types import TracebackType
from typing import Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from sharedstream.demo.observe import DemoSnapshot
from sharedstream.demo.watchers import DLQ_TOPIC, TOPIC
from sharedstream.ops.dlq.reader import DeadLetter

PLAIN_EVERY_S = 2.0
SHOWN_DEAD_LETTERS = 3


def where(dead_letter: DeadLetter) -> str:
    """The rejected message's place in the orders topic (the demo writes no foreign records)."""
    origin = dead_letter.origin
    return f"{TOPIC}[{origin.partition}]@{origin.offset}" if origin else "?"


def reason_text(dead_letter: DeadLetter) -> str:
    """``watcher: reason`` for every watcher that rejected the message."""
    return "; ".join(f"{w}: {r}" for w, r in sorted(dead_letter.rejections.items())) or "?"


def outage_text(snap: DemoSnapshot) -> Text:
    """The injected cause: when the simulated outage happens."""
    style = "bold red" if snap.outage.startswith("active") else "dim"
    return Text(f"simulated database outage: {snap.outage}", style=style)


def database_text(snap: DemoSnapshot) -> Text:
    """The effect, as the triggerer's unit of work sees it."""
    state = snap.triggerer
    if not state.database_healthy:
        return Text.assemble(("● UNAVAILABLE", "bold red"),
                             f"  {state.failed_commits} failed commits, retrying;"
                             " Kafka offsets wait")
    if state.failed_commits:
        return Text.assemble(("● recovered", "bold green"),
                             f"  after {state.failed_commits} failed commit attempts")
    return Text("● healthy", style="bold green")


class Display:
    """Shows snapshots: live on a terminal, plain lines otherwise."""

    def __init__(self, console: Console, seconds: float) -> None:
        self.console = console
        self.seconds = seconds
        self._live: Live | None = None
        self._last_plain = -PLAIN_EVERY_S
        self._seen_dead_letters = 0
        self._was_healthy = True
        self._replay = ""

    def __enter__(self) -> Display:
        if self.console.is_terminal:
            self._live = Live(console=self.console, refresh_per_second=4, transient=False)
            self._live.__enter__()
        else:
            self.console.print(f"sharedstream demo: 2 watchers on {TOPIC}, "
                               f"{self.seconds:g}s (plain output: not a terminal)")
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._live is not None:
            self._live.__exit__(exc_type, exc, tb)

    def show(self, snap: DemoSnapshot) -> None:
        if self._live is not None:
            self._live.update(render(snap, self.seconds))
            return
        notes = self._notes(snap)
        if notes or snap.elapsed - self._last_plain >= PLAIN_EVERY_S:
            self._last_plain = snap.elapsed
            self.console.print(plain_line(snap), highlight=False, soft_wrap=True)
            for note in notes:
                self.console.print(f"         {note}", highlight=False, soft_wrap=True)

    def _notes(self, snap: DemoSnapshot) -> list[str]:
        notes = [f"dead letter: {where(d)} {reason_text(d)}"
                 for d in snap.dead_letters[self._seen_dead_letters:]]
        self._seen_dead_letters = len(snap.dead_letters)
        if snap.replay != self._replay:
            if self._replay:
                notes.append(snap.replay)
            self._replay = snap.replay
        healthy = snap.triggerer.database_healthy
        if healthy != self._was_healthy:
            notes.append("database answers again: the held commits go through" if healthy
                         else "database outage: commits fail and are retried; offsets stop")
            self._was_healthy = healthy
        return notes


def plain_line(snap: DemoSnapshot) -> str:
    state = snap.triggerer
    events = " ".join(f"{name}={n}" for name, n in snap.events.items())
    database = "healthy" if state.database_healthy else "OUTAGE"
    return (f"[{snap.elapsed:5.1f}s] produced {sum(snap.produced.values())} "
            f"committed {sum(n or 0 for n in snap.committed.values())} | events {events} | "
            f"dlq {len(snap.dead_letters)} | in flight {state.in_flight} held {state.held} | "
            f"database {database}")


def render(snap: DemoSnapshot, seconds: float) -> RenderableType:
    """The whole live view for one snapshot."""
    header = Table.grid(padding=(0, 2))
    header.add_column()
    header.add_column()
    header.add_row(ProgressBar(total=seconds, completed=min(snap.elapsed, seconds), width=30),
                   Text(f"{snap.elapsed:4.1f}s of {seconds:g}s   Ctrl-C stops early",
                        style="dim"))
    intro = Text.assemble(
        "Two watchers share ", ("one consumer", "bold"), f" of {TOPIC} on an in-process Kafka;",
        " their events and watermarks go to SQLite. An offset is committed only once ",
        ("every", "bold"), " watcher's work for the message is in the database.")
    top = Panel(Group(intro, header), title="[bold]sharedstream demo", border_style="cyan",
                box=box.ROUNDED)
    body = Table.grid(padding=(0, 4))
    body.add_column()
    body.add_column()
    body.add_row(_kafka_table(snap), Group(_assets_table(snap), Text(""), _triggerer_table(snap)))
    return Group(top, body, _dead_letters(snap))


def _kafka_table(snap: DemoSnapshot) -> Table:
    table = Table(title=f"Partitions of {TOPIC}", title_justify="left", box=box.SIMPLE_HEAD,
                  title_style="bold", caption_justify="left", caption_style="dim",
                  caption="committed: the group's offset on the broker\n"
                          "last_seen: paid_orders' watermark (asset state)")
    for name in ("partition", "produced", "committed", "lag", "last_seen"):
        table.add_column(name, justify="right")
    marks = snap.watermarks.get("paid_orders", {})
    produced_total = committed_total = 0
    for partition in sorted(snap.committed):
        produced = snap.produced.get(partition, 0)
        committed = snap.committed[partition]
        produced_total += produced
        committed_total += committed or 0
        table.add_row(str(partition), str(produced), "-" if committed is None else str(committed),
                      _lag(produced - (committed or 0)),
                      _value(marks.get(f"last_seen/{partition}")))
    table.add_section()
    table.add_row("total", str(produced_total), str(committed_total),
                  _lag(produced_total - committed_total), "", style="bold")
    return table


def _lag(lag: int) -> Text:
    return Text(str(lag), style="yellow" if lag else "green")


def _value(value: Any) -> str:
    return "-" if value is None else str(value)


def _assets_table(snap: DemoSnapshot) -> Table:
    table = Table(title="Events (SQLite)", title_justify="left", box=box.SIMPLE_HEAD,
                  title_style="bold")
    table.add_column("asset")
    table.add_column("events", justify="right")
    for name, count in snap.events.items():
        table.add_row(name, str(count))
    return table


def _triggerer_table(snap: DemoSnapshot) -> Table:
    state = snap.triggerer
    table = Table(title="Triggerer", title_justify="left", title_style="bold", box=None,
                  show_header=False, padding=(0, 2, 0, 1))
    table.add_column(style="bold")
    table.add_column()
    table.add_row("in flight", f"{state.in_flight} messages handed out, {state.queued} queued")
    table.add_row("held", f"{state.held} messages waiting for a retry")
    table.add_row("database", database_text(snap))
    table.add_row("", outage_text(snap))
    return table


def _dead_letters(snap: DemoSnapshot) -> RenderableType:
    letters = snap.dead_letters
    title = Text.assemble((f"Dead letters ({DLQ_TOPIC}): ", "bold"), str(len(letters)),
                          f"   poison messages sent: {snap.poison_sent}")
    lines: list[RenderableType] = [title]
    for letter in letters[-SHOWN_DEAD_LETTERS:]:
        lines.append(Text.assemble(f"  {where(letter)}  ",
                                   (reason_text(letter), "red")))
    lines.append(Text(f"  {snap.replay}", style="cyan"))
    return Group(*lines)


def summary_table(summary: dict[str, Any]) -> Table:
    """The end-of-run summary, one row per fact."""
    table = Table(title="sharedstream demo: summary", title_justify="left", box=box.ROUNDED,
                  title_style="bold", show_header=False)
    table.add_column(style="bold")
    table.add_column()
    produced, committed = summary["produced"], summary["committed"]
    table.add_row("produced / committed",
                  "  ".join(f"p{p}: {produced[p]}/{committed.get(p)}" for p in produced))
    table.add_row("events", "  ".join(f"{k}: {v}" for k, v in summary["events"].items()))
    marks = summary["watermarks"].get("paid_orders", {})
    table.add_row("watermarks", "  ".join(f"{k}={v}" for k, v in marks.items()) or "-")
    dlq = summary["dlq"]
    table.add_row("dead letters", f"{dlq['records']} (last: {dlq['last_reason'] or '-'})")
    replay = summary["replay"]
    table.add_row("fix + replay", "not reached" if replay["fixed_at"] is None else
                  f"at t={replay['fixed_at']:g}s: {replay['replayed']} dead letter(s) through "
                  f"{replay['topic']}, events made by the watchers that rejected them")
    database = summary["database"]
    if database["outage_observed"]:
        outage = (f"{database['outage_seconds']:g}s from t={database['outage_from']:g}s: "
                  f"{database['failed_commits']} failed commit attempts, "
                  + ("recovered" if database["recovered"] else "NOT recovered"))
    else:
        outage = "not observed (no commit was attempted during it)"
    table.add_row("database outage", outage)
    if summary["interrupted"]:
        table.add_row("stopped", f"early (Ctrl-C) at t={summary['seconds']:g}s")
    return table


def summary_after(summary: dict[str, Any]) -> list[str]:
    """The summary's files and the command to look closer, as plain lines below the
    table: in a cell they would wrap, and a wrapped command cannot be pasted."""
    if not summary["kept"]:
        return ["files: removed at exit (sharedstream demo --keep keeps the database and "
                "the log to look closer)"]
    url = summary["database_url"]
    return [f"database: {url}", f"log: {summary['log_file']}",
            "look closer: sharedstream events list --asset paid_orders --database-url "
            + shlex.quote(url)]

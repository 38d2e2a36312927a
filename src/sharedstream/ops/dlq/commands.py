"""``sharedstream dlq inspect|replay``: look at a dead-letter topic, and redrive it.

Both read through :class:`~sharedstream.ops.dlq.reader.DeadLetterReader`
(manual assignment, up to the end offsets seen at start). ``inspect`` commits
nothing. ``replay`` commits only its own group's offsets, after each batch is
delivered (see ``replay.py`` for the failure window).

Exit codes: 0 ok, 1 runtime failure (missing topic, broker unreachable,
credentials refused, failed delivery), 2 usage or configuration error.
"""

from __future__ import annotations

import base64
import functools
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import click

from sharedstream.ops.clitools import (
    CommandError,
    RenamedOption,
    console,
    emit_json,
    handled,
    kafka_connection,
    kafka_connection_option,
    option_value,
    stamp,
)
from sharedstream.ops.dlq.reader import DeadLetter, DeadLetterError, DeadLetterReader
from sharedstream.ops.dlq.replay import (
    DEFAULT_MAX_REPLAYS,
    REPLAY,
    Action,
    Replayer,
    ReplayRules,
    default_group,
    default_parking_topic,
)
from sharedstream.statestore.durations import parse_instant, utcnow

if TYPE_CHECKING:
    from rich.table import Table

P = ParamSpec("P")
R = TypeVar("R")

# What `dlq inspect` reads unless --limit says otherwise: a table of a few thousand rows
# took seconds to render (4.5 s for 2,000 records, issue 43) and no one reads it whole.
INSPECT_LIMIT = 100

PREVIEW_CHARS = 48


def preview(data: bytes | None, width: int = PREVIEW_CHARS) -> str:
    """A one-line, terminal-safe view of a key or value: text when it is UTF-8 (control
    characters escaped), hex otherwise; cut at ``width`` characters with its size."""
    if data is None:
        return "<null>"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        shown = "hex:" + data[: width // 2].hex()
        return shown + (f"… ({len(data)} bytes)" if len(data) > width // 2 else "")
    escaped = text.encode("unicode_escape").decode("ascii") if not text.isprintable() else text
    if len(escaped) > width:
        return escaped[:width] + f"… ({len(data)} bytes)"
    return escaped


def binary_json(data: bytes | None) -> dict[str, str | None] | None:
    """Exact bytes for ``--json``: base64 always, the text too when it is UTF-8."""
    if data is None:
        return None
    try:
        text: str | None = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    return {"text": text, "base64": base64.b64encode(data).decode("ascii")}


@dataclass(slots=True)
class Row:
    """One distinct dead letter (by identity) and how many DLQ records carry it."""

    first: DeadLetter
    count: int = 1
    dlq_offsets: list[tuple[int, int]] = field(default_factory=list)


def group_rows(records: Iterable[DeadLetter]) -> list[Row]:
    """Records with the same identity collapse into one row (first copy shown)."""
    rows: dict[str, Row] = {}
    for record in records:
        row = rows.get(record.dedupe_key)
        if row is None:
            row = rows[record.dedupe_key] = Row(record)
        else:
            row.count += 1
        row.dlq_offsets.append((record.partition, record.offset))
    return list(rows.values())


def count_dead_letter(record: DeadLetter, reasons: Counter[str],
                      watchers: Counter[str]) -> None:
    """One distinct dead letter in the histograms: once per reason it carries (two
    watchers rejecting it for one reason are one dead letter with that reason, not two),
    once per watcher that rejected it; a foreign one as ``<foreign>``."""
    if record.foreign:
        reasons["<foreign>"] += 1
        return
    reasons.update(set(record.rejections.values()))
    watchers.update(record.rejections.keys())


def histograms(rows: Sequence[Row]) -> tuple[Counter[str], Counter[str]]:
    """(reasons, watchers) over distinct dead letters (:func:`count_dead_letter`)."""
    reasons: Counter[str] = Counter()
    watchers: Counter[str] = Counter()
    for row in rows:
        count_dead_letter(row.first, reasons, watchers)
    return reasons, watchers


def _ms(ms: int) -> str:
    return stamp(datetime.fromtimestamp(ms / 1000, UTC))


def row_json(row: Row) -> dict[str, Any]:
    r = row.first
    origin = r.origin
    return {
        "copies": row.count,
        "dlq": [{"partition": p, "offset": o} for p, o in row.dlq_offsets],
        "foreign": r.foreign, "problem": r.problem, "identity": r.identity,
        "original": None if origin is None else {
            "topic": origin.topic, "topic_id": origin.topic_id,
            "partition": origin.partition, "offset": origin.offset,
            "timestamp": origin.timestamp},
        "consumer_group": r.consumer_group, "rejections": dict(r.rejections),
        "replay_count": r.replay_count, "timestamp": r.timestamp,
        "key": binary_json(r.key), "value": binary_json(r.value),
        "headers": [[name, binary_json(value)] for name, value in r.headers],
    }


def rows_table(topic: str, rows: Sequence[Row], read: int, available: int) -> Table:
    from rich.table import Table

    more = (f"the first {read:,} of {available:,} records (--limit N reads more)"
            if read < available else f"{read:,} record(s)")
    table = Table(title=f"{topic}: {more}, {len(rows):,} distinct")
    for column in ("original", "original time", "rejected by", "replays", "key", "value",
                   "copies"):
        table.add_column(column, justify="right" if column in ("replays", "copies") else "left",
                         overflow="fold")
    for row in rows:
        r = row.first
        if r.origin is None:
            where = f"foreign @ {r.topic}[{r.partition}]@{r.offset}"
            rejected = r.problem or ""
            when = _ms(r.timestamp)
        else:
            o = r.origin
            where = f"{o.topic}[{o.partition}]@{o.offset}"
            rejected = "\n".join(f"{w}: {reason}" for w, reason in r.rejections.items())
            when = _ms(o.timestamp)
        table.add_row(where, when, rejected, str(r.replay_count), preview(r.key, 24),
                      preview(r.value), str(row.count))
    return table


def histogram_table(title: str, counts: Counter[str]) -> Table:
    from rich.table import Table

    table = Table(title=title)
    table.add_column(title.split()[0].rstrip("s"), overflow="fold")
    table.add_column("records", justify="right")
    table.add_column("")
    top = max(counts.values(), default=1)
    for name, n in counts.most_common():
        table.add_row(name, str(n), "█" * max(1, round(30 * n / top)))
    return table


def _reading(fn: Callable[P, R]) -> Callable[P, R]:
    """Reader failures are one-line runtime errors (exit 1)."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except DeadLetterError as exc:
            raise CommandError(str(exc)) from None

    return wrapper


def _common(fn: Callable[P, R]) -> Callable[P, R]:
    fn = click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=10.0,
                      show_default=True, help="Seconds to wait for each broker request.")(fn)
    fn = click.option("--config", "config", metavar="PATH", type=click.Path(dir_okay=False),
                      help="sharedstream.toml to read.")(fn)
    return kafka_connection_option(fn)


def _instant(text: str | None, option: str) -> datetime | None:
    if text is None:
        return None
    return option_value(option, lambda given: parse_instant(given, utcnow()), text)


@click.group("dlq")
def dlq_group() -> None:
    """Dead-letter topics: inspect and replay the records the triggerer rejected."""


@dlq_group.command("inspect")
@click.argument("topic")
@_common
@click.option("--limit", type=click.IntRange(min=1), metavar="N", default=INSPECT_LIMIT,
              show_default=True, help="Read at most N records (the oldest first).")
@click.option("--since", metavar="TIME",
              help="Start at the first record stamped at or after TIME (ISO-8601, naive = "
                   "UTC; or a duration ago such as 2h).")
@click.option("--stats", is_flag=True,
              help="Also print histograms of reasons and watchers (of the records read).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (bytes as text + base64).")
@click.pass_context
@handled
@_reading
def dlq_inspect(ctx: click.Context, /, topic: str, timeout: float, limit: int,
                since: str | None, stats: bool, as_json: bool, **_: Any) -> None:
    """One row per dead letter of TOPIC, the oldest first; copies of one rejection (same
    identity) are shown once with their count. Commits nothing.

    It reads --limit records (100 unless asked), and says how many the topic holds:
    start later with --since TIME, or read more with --limit N.
    """
    start = _instant(since, "--since")
    connection = kafka_connection(ctx)
    records: list[DeadLetter] = []
    with DeadLetterReader(connection, topic, since=start, timeout=timeout) as reader:
        available = reader.total
        for record in reader:
            records.append(record)
            if len(records) >= limit:
                break
    rows = group_rows(records)
    reasons, watchers = histograms(rows)
    if as_json:
        out: dict[str, Any] = {"topic": topic, "read": len(records), "available": available,
                               "distinct": len(rows),
                               "foreign": sum(1 for r in rows if r.first.foreign),
                               "records": [row_json(r) for r in rows]}
        if stats:
            out["stats"] = {"reasons": dict(reasons), "watchers": dict(watchers)}
        emit_json(out)
        return
    console.print(rows_table(topic, rows, len(records), available))
    if stats:
        console.print(histogram_table("reasons", reasons))
        console.print(histogram_table("watchers", watchers))


@dlq_group.command("replay")
@click.argument("topic")
@_common
@click.option("--to-topic", "--to", "to", cls=RenamedOption, default=REPLAY,
              show_default=True, metavar="REPLAY|ORIGINAL|TOPIC",
              help="REPLAY: TOPIC.replay, read only by the triggerer groups that "
                   "dead-letter to TOPIC (created when missing); ORIGINAL: each record's "
                   "original topic, seen by every reader of it; or this topic. Records "
                   "without sharedstream headers are replayed only with a topic.")
@click.option("--watcher", "--filter-watcher", "filter_watchers", cls=RenamedOption,
              multiple=True, metavar="W",
              help="Only records rejected by watcher W (repeatable: any of them).")
@click.option("--reason", "--filter-reason", "filter_reasons", cls=RenamedOption,
              multiple=True, metavar="R",
              help="Only records with a rejection reason containing R (repeatable).")
@click.option("--since", metavar="TIME", help="Only records stamped at or after TIME.")
@click.option("--until", metavar="TIME", help="Only records stamped before TIME.")
@click.option("--max-replays", type=click.IntRange(min=0), default=DEFAULT_MAX_REPLAYS,
              show_default=True, metavar="N",
              help="Loop guard: a record already replayed N times is parked instead.")
@click.option("--parking-topic", metavar="T", help="Where parked records go "
              "(default: <TOPIC>.parking; it must exist).")
@click.option("--group", metavar="G",
              help="Consumer group holding the replay's position (default: "
                   "sharedstream-dlq-replay.<TOPIC>).")
@click.option("--from-start", is_flag=True,
              help="Read TOPIC from its start (or --since), not from where the group "
                   "stopped: replays records an earlier replay took, again.")
@click.option("--batch-size", type=click.IntRange(min=1), default=500, show_default=True,
              help="Records produced and flushed per commit: at most this many are sent "
                   "again after a crash.")
@click.option("--max-rate", type=click.FloatRange(min=0, min_open=True), metavar="N",
              help="At most N records per second (spare the triggerer).")
@click.option("--dry-run", is_flag=True, help="Decide and count; produce and commit nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.pass_context
@handled
@_reading
def dlq_replay(ctx: click.Context, /, topic: str, timeout: float, to: str,
               filter_watchers: tuple[str, ...], filter_reasons: tuple[str, ...],
               since: str | None, until: str | None, max_replays: int,
               parking_topic: str | None, group: str | None, from_start: bool,
               batch_size: int, max_rate: float | None, dry_run: bool, as_json: bool,
               **_: Any) -> None:
    """Re-produce the dead letters of TOPIC for the watchers that rejected them only, each
    once, through the replay topic TOPIC.replay (other readers of the original topic never
    see them); park those replayed too often. Resumable: run it again after a failure."""
    rules = ReplayRules(
        parking_topic=parking_topic or default_parking_topic(topic), to=to,
        watchers=frozenset(filter_watchers), reasons=filter_reasons,
        since=_instant(since, "--since"), until=_instant(until, "--until"),
        max_replays=max_replays)
    replayer = Replayer(kafka_connection(ctx), topic, rules, group=group or default_group(topic),
                        dry_run=dry_run, batch_size=batch_size, max_rate=max_rate,
                        timeout=timeout, from_start=from_start)
    from sharedstream.ops.dlq.replay_view import ProgressView, summary_table

    with ProgressView(enabled=not as_json, dry_run=dry_run) as view:
        summary = replayer.run(view.update)
    if as_json:
        emit_json(summary.as_dict())
        return
    if summary.interrupted_before:
        console.print(f"note: the previous run of group {summary.group} was interrupted; "
                      f"up to one batch of records after its last commit may have been "
                      "replayed twice (events are idempotent by original coordinates)")
    console.print(summary_table(summary))
    if summary.counts[Action.FOREIGN]:
        console.print(f"{summary.counts[Action.FOREIGN]} record(s) without sharedstream "
                      "headers were skipped: replay them with an explicit --to TOPIC "
                      "(and another --group)")
    if summary.counts[Action.FILTERED] and not dry_run:
        console.print("filtered-out records were committed past too: replay them later with "
                      "--from-start or another --group")

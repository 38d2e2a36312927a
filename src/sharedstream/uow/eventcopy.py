"""PostgreSQL: a large batch's events by ``COPY``, the ids still commit-ordered.

Why: the conflict-skipping insert (:func:`~sharedstream.statestore.events.insert_events`,
one ``json_populate_recordset`` statement with ``ON CONFLICT DO NOTHING``) costs the
server more per row than ``COPY`` into the same table: measured on the test server
with a batch watcher's batches (issue 28), 23-30 against 14-18 us per row at 3,500
rows, 38-57 against 24-36 at 500, alternating on one table. Both forms pay for the
table's indexes and foreign key; the statement adds the JSON parse and the speculative
insertion of ``ON CONFLICT``.

``COPY`` cannot skip a row already there, and after a redelivery some are (the event
key makes a re-insert a no-op). So a batch is copied optimistically: a duplicate key
fails the ``COPY`` with a unique violation, the transaction rolls back whole, and the
caller runs the batch again with the conflict-skipping statement (see
:class:`~sharedstream.uow.transaction.BatchTransaction`).

Commit order: the sequence row is updated first (its lock held until the commit, the
notification queued), then the rows are copied with the ids it handed out, in row
order; exactly what the one statement does, in two statements of one transaction.
A small batch keeps the one statement: it is one round trip where this is four
(``BEGIN``, the update, the copy, ``COMMIT``), and its rows are too few for the
per-row saving to pay for them.

Failure windows: a connection lost during the ``COPY`` or the ``COMMIT`` rolls the
transaction back (or, lost during ``COMMIT``, leaves it unknown); either way the batch
is retried like any failed batch and the event key makes a committed one a no-op.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine

from sharedstream.statestore.events import NOTIFY_CHANNEL
from sharedstream.statestore.models import asset_event, event_sequence
from sharedstream.statestore.sql import bound_columns

# Rows from which a batch is copied rather than inserted by the one statement.
COPY_MIN_ROWS = 100


def can_copy(engine: Engine) -> bool:
    """Whether ``engine`` is PostgreSQL through psycopg 3, whose cursor has ``copy``."""
    return engine.dialect.name == "postgresql" and engine.dialect.driver == "psycopg"


def is_duplicate_key(exc: BaseException) -> bool:
    """Whether ``exc`` is PostgreSQL's unique violation (SQLSTATE 23505), raised by the
    driver or wrapped by SQLAlchemy: the ``COPY`` met an event already stored."""
    cause = getattr(exc, "orig", None) or exc
    return getattr(cause, "sqlstate", None) == "23505"


def copy_events(connection: Connection, columns: Sequence[str],
                rows: list[tuple[Any, ...]]) -> int:
    """Copy ``rows`` (tuples of ``columns``, see ``EVENT_COLUMNS``; no ids) into
    ``asset_event`` with commit-ordered ids, in ``connection``'s open transaction; return
    how many (all, or a unique violation). Call it last in the transaction, like
    ``insert_events``."""
    preparer = connection.dialect.identifier_preparer
    sequence = preparer.format_table(event_sequence)
    # Through SQLAlchemy: a connection that went stale while idle fails here, as a
    # disconnect the writer's connection knows how to replace.
    base = connection.execute(
        text(f"UPDATE {sequence} SET last_id = last_id + :n WHERE id = 1 "
             f"RETURNING last_id - :n, pg_notify('{NOTIFY_CHANNEL}', '')"),
        {"n": len(rows)}).scalar_one()
    names = ", ".join(["id", *(preparer.quote(name) for name in columns)])
    data = copy_text(range(base + 1, base + 1 + len(rows)),
                     bound_columns(connection, asset_event, columns, rows))
    driver = connection.connection.driver_connection
    assert driver is not None
    with driver.cursor() as cursor, cursor.copy(
            f"COPY {preparer.format_table(asset_event)} ({names}) FROM STDIN") as copy:
        copy.write(data)
    return len(rows)


def copy_text(ids: range, columns: Sequence[Sequence[Any]]) -> str:
    """``COPY``'s text format of rows ``ids`` followed by ``columns`` (one sequence per
    column, bind-processed), built column by column: psycopg's ``write_row`` formatted
    every field of every row in turn, the largest part of the writer's time on large
    batches (issue 28). Text fields are escaped, datetimes sent as ISO-8601 (each
    distinct value converted once), None as ``\\N``."""
    fields = [list(map(str, ids))]
    for column in columns:
        sample = next((value for value in column if value is not None), None)
        if isinstance(sample, str):
            fields.append([_NULL if value is None else _escape(value) for value in column])
        elif isinstance(sample, int):
            fields.append([_NULL if value is None else str(value) for value in column])
        else:  # datetimes (a batch's events share one), or all NULL
            memo = {value: _field(value) for value in set(column)}
            fields.append([memo[value] for value in column])
    return "\n".join(map("\t".join, zip(*fields, strict=True))) + "\n"


_NULL = "\\N"


def _escape(value: str) -> str:
    """A text field of ``COPY``'s text format: backslash and the row and field
    separators escaped (JSON text holds no raw control characters, so mostly no-ops)."""
    return (value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
            .replace("\t", "\\t"))


def _field(value: Any) -> str:
    if value is None:
        return _NULL
    if isinstance(value, datetime | date):
        return value.isoformat()
    raise TypeError(f"cannot COPY a {type(value).__name__} into asset_event")

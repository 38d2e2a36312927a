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
:class:`~sharedstream.triggerer.persistence.DatabaseWorkSink`).

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

from operator import itemgetter
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine

from sharedstream.statestore.events import NOTIFY_CHANNEL
from sharedstream.statestore.models import asset_event, event_sequence

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


def copy_events(connection: Connection, rows: list[dict[str, Any]]) -> int:
    """Copy ``rows`` (``asset_event`` rows without ids) into ``asset_event`` with
    commit-ordered ids, in ``connection``'s open transaction; return how many (all, or
    a unique violation). Call it last in the transaction, like ``insert_events``."""
    preparer = connection.dialect.identifier_preparer
    sequence = preparer.format_table(event_sequence)
    # Through SQLAlchemy: a connection that went stale while idle fails here, as a
    # disconnect the writer's connection knows how to replace.
    base = connection.execute(
        text(f"UPDATE {sequence} SET last_id = last_id + :n WHERE id = 1 "
             f"RETURNING last_id - :n, pg_notify('{NOTIFY_CHANNEL}', '')"),
        {"n": len(rows)}).scalar_one()
    names = [name for name in rows[0] if name != "id"]  # a retried row may hold one
    values = itemgetter(*names)
    columns = ", ".join(["id", *(preparer.quote(name) for name in names)])
    driver = connection.connection.driver_connection
    assert driver is not None
    with driver.cursor() as cursor, cursor.copy(
            f"COPY {preparer.format_table(asset_event)} ({columns}) FROM STDIN") as copy:
        for number, row in enumerate(rows, start=base + 1):
            row["id"] = number
            copy.write_row((number, *values(row)))
    return len(rows)

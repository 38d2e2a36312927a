"""Dialect-correct single statements: upserts and insert-if-absent.

Each dialect's module (its INSERT with ON CONFLICT or ON DUPLICATE KEY) is imported by
the statement that needs it, by then loaded by the engine already: importing the three
here cost every process ~50 ms of start-up, most of it PostgreSQL's.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from datetime import date, datetime
from itertools import chain
from typing import TYPE_CHECKING, Any

from sqlalchemy import Table, UniqueConstraint, func, select, text, tuple_
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql.expression import ColumnElement

from sharedstream.statestore.types import JsonPayload

if TYPE_CHECKING:
    from sqlalchemy.dialects import postgresql, sqlite

MYSQL_DUPLICATE_KEY = 1062


def _is_mysql(connection: Connection) -> bool:
    return connection.dialect.name in ("mysql", "mariadb")


def _on_conflict_insert(connection: Connection, table: Table
                        ) -> postgresql.Insert | sqlite.Insert:
    """PostgreSQL's or SQLite's INSERT into ``table``, which takes ON CONFLICT."""
    if connection.dialect.name == "postgresql":
        from sqlalchemy.dialects import postgresql

        return postgresql.insert(table)
    from sqlalchemy.dialects import sqlite

    return sqlite.insert(table)


def upsert(
    connection: Connection,
    table: Table,
    rows: Sequence[Mapping[str, Any]],
    conflict: Sequence[str],
    update: Sequence[str],
    extra: Mapping[str, ColumnElement[Any]] | None = None,
) -> None:
    """Insert ``rows``, or update columns ``update`` (plus ``extra`` expressions over the
    existing row) where the unique key ``conflict`` already exists: one statement,
    executed as a multi-row batch, never a read-then-write."""
    if not rows:
        return
    extra = dict(extra or {})
    if _is_mysql(connection):
        from sqlalchemy.dialects import mysql

        my_stmt = mysql.insert(table)
        my_set: dict[str, Any] = {c: my_stmt.inserted[c] for c in update}
        my_set.update(extra)
        connection.execute(my_stmt.on_duplicate_key_update(my_set), list(rows))
        return
    stmt = _on_conflict_insert(connection, table)
    set_: dict[str, Any] = {c: stmt.excluded[c] for c in update}
    set_.update(extra)
    connection.execute(
        stmt.on_conflict_do_update(index_elements=list(conflict), set_=set_), list(rows)
    )


def insert_if_absent(connection: Connection, table: Table, row: Mapping[str, Any]) -> bool:
    """Insert ``row`` unless its unique key exists; True if this call inserted it.

    MySQL has no ON CONFLICT DO NOTHING (INSERT IGNORE would also swallow foreign-key and
    other errors), so there a duplicate-key error is caught; InnoDB rolls back only the
    statement, the surrounding transaction stays usable.
    """
    if _is_mysql(connection):
        try:
            connection.execute(table.insert().values(dict(row)))
        except IntegrityError as exc:
            if getattr(exc.orig, "args", (None,))[0] == MYSQL_DUPLICATE_KEY:
                return False
            raise
        return True
    stmt = _on_conflict_insert(connection, table)
    # RETURNING rather than rowcount: drivers may report -1 for INSERT ... ON CONFLICT.
    first_pk = next(iter(table.primary_key.columns))
    result = connection.execute(
        stmt.values(dict(row)).on_conflict_do_nothing().returning(first_pk)
    )
    return result.first() is not None


def insert_ignore_many(
    connection: Connection, table: Table, rows: Sequence[Mapping[str, Any]]
) -> int:
    """Insert ``rows`` (all with the same keys), skipping each row whose unique key
    exists; return how many were inserted.

    PostgreSQL: see :func:`_insert_ignore_json`. SQLite: ``ON CONFLICT DO NOTHING ...
    RETURNING``; the RETURNING makes SQLAlchemy send pages of multi-row VALUES instead of
    one statement per row, and its rows count what was inserted. MySQL/MariaDB: ``ON
    DUPLICATE KEY UPDATE`` of the primary key to itself, a no-op on duplicates that, unlike
    INSERT IGNORE, still raises for foreign-key and other errors (the driver batches
    executemany into multi-row VALUES). Its row count cannot tell a duplicate from an
    insert (SQLAlchemy connects with ``CLIENT_FOUND_ROWS``, which the compare-and-swap
    updates rely on, and which counts a row "set to its current values" as 1), so the
    rows already present are counted first; a concurrent insert of the same key between
    the two statements is counted as ours (the count feeds metrics, nothing else).
    """
    if not rows:
        return 0
    first_pk = next(iter(table.primary_key.columns))
    if _is_mysql(connection):
        key = _unique_key(table)
        wanted = {tuple(row[c.name] for c in key) for row in rows}
        present = connection.execute(
            select(func.count()).select_from(table)
            .where(tuple_(*key).in_(list(wanted)))).scalar_one()
        from sqlalchemy.dialects import mysql

        my_stmt = mysql.insert(table)
        connection.execute(my_stmt.on_duplicate_key_update({first_pk.name: first_pk}),
                           list(rows))
        return len(wanted) - int(present)
    if connection.dialect.name == "postgresql":
        return _insert_ignore_json(connection, table, rows)
    return _insert_ignore_sqlite(connection, table, rows)


def _bound(connection: Connection, table: Table, rows: Sequence[Mapping[str, Any]],
           names: Sequence[str], then: Callable[[Any], Any] | None = None
           ) -> Sequence[Mapping[str, Any]]:
    """``rows`` after their columns' bind processing (type decorators, the dialect's
    date formats), then ``then`` on each processed value, each distinct value processed
    once (see :func:`_processed`)."""
    dialect = connection.dialect
    processors: list[tuple[str, Callable[[Any], Any]]] = [
        (name, processor) for name in names
        if (processor := table.c[name].type.dialect_impl(dialect).bind_processor(dialect))
    ]
    if then is not None:
        processors = [(name, _chain(process, then)) for name, process in processors]
    return _processed(rows, processors) if processors else rows


def _chain(first: Callable[[Any], Any], then: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: then(first(value))


def _insert_ignore_sqlite(
    connection: Connection, table: Table, rows: Sequence[Mapping[str, Any]]
) -> int:
    """SQLite's insert-if-absent of many rows: :func:`insert_ignore_tuples` of their
    bind-processed values."""
    names = list(rows[0])
    bound = _bound(connection, table, rows, names)
    return insert_ignore_tuples(connection, table, names,
                                [tuple(row[n] for n in names) for row in bound])


# Rows per multi-row statement of insert_ignore_tuples: within SQLite's 32,766 bound
# parameters for tables of up to 127 columns.
TUPLES_PER_STATEMENT = 256


def insert_ignore_tuples(connection: Connection, table: Table, names: Sequence[str],
                         rows: Sequence[tuple[Any, ...]]) -> int:
    """SQLite: insert ``rows`` (tuples of columns ``names``, already bind-processed),
    skipping each row whose unique key exists; return how many were inserted.

    ``INSERT ... ON CONFLICT DO NOTHING`` of ``TUPLES_PER_STATEMENT`` rows at a time
    (the rest by the driver's ``executemany`` of the one-row form). Why not
    ``executemany`` of all of them: ``sqlite3`` lets go of the GIL around every row's
    step, and on the writer thread each row then waited for the event loop to hand it
    back. Through SQLAlchemy's Core insert the same batch cost about twice as much
    client CPU (per-row parameter processing). A statement's row count, and the sum of
    an executemany's, counts only rows inserted, not skipped duplicates."""
    quote = connection.dialect.identifier_preparer.quote
    target = connection.dialect.identifier_preparer.format_table(table)
    head = f"INSERT INTO {target} ({', '.join(quote(n) for n in names)}) VALUES "
    one = f"({', '.join('?' * len(names))})"
    full = len(rows) - len(rows) % TUPLES_PER_STATEMENT
    inserted = 0
    if full:
        many = f"{head}{', '.join([one] * TUPLES_PER_STATEMENT)} ON CONFLICT DO NOTHING"
        for start in range(0, full, TUPLES_PER_STATEMENT):
            flat = tuple(chain.from_iterable(rows[start:start + TUPLES_PER_STATEMENT]))
            inserted += connection.exec_driver_sql(many, flat).rowcount
    if full < len(rows):
        inserted += connection.exec_driver_sql(f"{head}{one} ON CONFLICT DO NOTHING",
                                               list(rows[full:])).rowcount
    return inserted


def bound_columns(connection: Connection, table: Table, names: Sequence[str],
                  rows: Sequence[tuple[Any, ...]]) -> list[Sequence[Any]]:
    """The columns of ``rows`` (tuples of columns ``names``), one sequence per column,
    after their column type's bind processing; each distinct value of a processed column
    processed once, as in :func:`_processed` (its values must be hashable)."""
    columns: list[Sequence[Any]] = list(zip(*rows, strict=True))
    dialect = connection.dialect
    for i, name in enumerate(names):
        process = table.c[name].type.dialect_impl(dialect).bind_processor(dialect)
        if process is not None:
            memo = {value: process(value) for value in set(columns[i])}
            columns[i] = [memo[value] for value in columns[i]]
    return columns


def _unique_key(table: Table) -> list[Any]:
    """The columns of the table's unique key (its first unique constraint)."""
    for constraint in table.constraints:
        if isinstance(constraint, UniqueConstraint):
            return list(constraint.columns)
    raise ValueError(f"table {table.name} has no unique key to insert-if-absent by")


def _json_default(value: object) -> str:
    if isinstance(value, datetime | date):
        return value.isoformat()
    raise TypeError(f"cannot send {type(value).__name__} as a JSON row")


def _iso(value: Any) -> Any:
    """Dates and datetimes as the ISO-8601 text a JSON row carries; the rest unchanged."""
    return value.isoformat() if isinstance(value, datetime | date) else value


def _processed(rows: Sequence[Mapping[str, Any]],
               processors: Sequence[tuple[str, Callable[[Any], Any]]]) -> list[dict[str, Any]]:
    """Copies of ``rows`` with ``processors`` applied, once per distinct value: a batch's
    rows share most processed values (every event of a batch has the same ``created_at``),
    and a type decorator's processing costs far more than a dict lookup."""
    copies = [dict(row) for row in rows]
    for name, process in processors:
        memo: dict[Any, Any] = {}
        for row in copies:
            value = row[name]
            try:
                row[name] = memo[value]
            except KeyError:
                row[name] = memo[value] = process(value)
            except TypeError:  # unhashable (a JSON column's dict): no memo
                row[name] = process(value)
    return copies


def _insert_ignore_json(
    connection: Connection, table: Table, rows: Sequence[Mapping[str, Any]]
) -> int:
    """PostgreSQL's insert-if-absent of many rows as ONE JSON parameter:
    ``INSERT ... SELECT <columns> FROM json_populate_recordset(NULL::<table>, :rows)
    ON CONFLICT DO NOTHING``.

    Why not multi-row VALUES: one parameter per cell, ~4,500 for 500 event rows, which
    SQLAlchemy renders and the server parses on every batch (measured ~115 ms per 500
    rows). Why not ``unnest`` of one array per column: psycopg builds array literals in
    Python, element by element (measured ~18 ms of client CPU per 500 rows, against ~5 ms
    here, where ``json.dumps`` runs in C and the server converts each field to its column
    type). Why not ``COPY``: it cannot skip a key already there, so it needs a temporary
    table and an ``INSERT ... SELECT ... ON CONFLICT DO NOTHING`` from it; measured for
    500-row batches (issue 28), that was no faster (19-20k against 21-23k rows/s, 1.8
    against 2.0 ms of client CPU per batch). Values first go through their column type's
    bind processing (so type decorators such as the UTC datetime check still apply); dates
    and datetimes then travel as ISO-8601 text. The statement's row count is what it
    really inserted (the server's command tag).
    """
    names = list(rows[0])
    target, quoted, payload = json_rows(connection, table, rows, names)
    stmt = text(
        f"INSERT INTO {target} ({', '.join(quoted)}) "
        f"SELECT {', '.join(record_fields(connection, table, names))} "
        f"FROM json_populate_recordset(NULL::{target}, CAST(:rows AS json)) AS r "
        "ON CONFLICT DO NOTHING"
    ).execution_options(preserve_rowcount=True)  # SQLAlchemy keeps an INSERT's only if asked
    return connection.execute(stmt, {"rows": payload}).rowcount


def record_fields(connection: Connection, table: Table, names: Sequence[str]) -> list[str]:
    """The fields ``names`` of record ``r`` of a ``json_populate_recordset`` over
    ``table``, as values of their columns.

    A ``jsonb`` column (an event payload on PostgreSQL) is the exception: the rows carry
    it as JSON text, which the record holds as a ``jsonb`` string; ``#>> '{}'`` takes that
    string's text out and the cast parses it into the document it encodes.
    """
    dialect = connection.dialect
    quote = dialect.identifier_preparer.quote
    fields = []
    for name in names:
        field = f"r.{quote(name)}"
        if dialect.name == "postgresql" and isinstance(table.c[name].type, JsonPayload):
            field = f"CAST({field} #>> '{{}}' AS jsonb)"
        fields.append(field)
    return fields


def json_rows(connection: Connection, table: Table, rows: Sequence[Mapping[str, Any]],
              names: Sequence[str]) -> tuple[str, list[str], str]:
    """Columns ``names`` of ``rows`` as PostgreSQL's ``json_populate_recordset`` takes
    them: the quoted table name, the quoted column names, and the JSON array text
    (bind-processed, dates as ISO text; see :func:`_insert_ignore_json`)."""
    dialect = connection.dialect
    # Dates to text here, once per distinct value (a batch's events share one created_at),
    # rather than in a json.dumps default called for every row.
    bound = _bound(connection, table, rows, names, then=_iso)
    if len(names) < len(rows[0]):
        bound = [{name: row[name] for name in names} for row in bound]
    quote = dialect.identifier_preparer.quote
    target = dialect.identifier_preparer.format_table(table)
    return (target, [quote(name) for name in names],
            json.dumps(bound, default=_json_default, separators=(",", ":")))

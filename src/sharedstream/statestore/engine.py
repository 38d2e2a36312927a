"""Engine creation with the per-dialect settings the state stores rely on."""

from __future__ import annotations

from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import (
    DataError,
    DBAPIError,
    DisconnectionError,
    IntegrityError,
    InterfaceError,
    OperationalError,
    StatementError,
)
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from sqlalchemy.pool import StaticPool


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    # Foreign keys are off by default in SQLite: ON DELETE CASCADE needs them. WAL lets
    # readers run while cleanup deletes; busy_timeout waits for a writer instead of failing.
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.close()


def make_engine(url: str, **kwargs: Any) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database in (None, "", ":memory:"):
            # One in-memory database shared by every thread, instead of one per connection.
            kwargs.setdefault("poolclass", StaticPool)
            kwargs.setdefault("connect_args", {"check_same_thread": False})
        engine = create_engine(parsed, **kwargs)
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    kwargs.setdefault("pool_pre_ping", True)
    return create_engine(parsed, **kwargs)


def describe_error(exc: BaseException) -> str:
    """A short, log-safe description of a database error: the driver's message without the
    SQL statement and its parameters (which may hold payloads), never the URL."""
    lines = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else 'no detail'}"


# What the database (or the way to it) may fix by itself: unreachable, connection reset,
# pool exhausted, deadlock, serialization failure, lock or statement timeout. Every driver
# we support reports the last four as OperationalError (psycopg: the SQLSTATE classes 40,
# 55P03 and 57014; MySQL/MariaDB: 1205 and 1213; SQLite: "database is locked").
_TRANSIENT = (OperationalError, InterfaceError, DisconnectionError, PoolTimeoutError,
              ConnectionError, TimeoutError)
# Names of the PEP 249 classes for "this statement's data is wrong", for a driver error
# that reaches us unwrapped.
_PERMANENT_DBAPI = frozenset({"DataError", "IntegrityError"})


def is_transient_error(exc: BaseException) -> bool:
    """True for a database error that retrying the same statements can get past.

    The infrastructure half of the failure policy (docs/guarantees.md,
    "How the shared stream works"): such an error is held and retried forever and counts no attempt.
    """
    return isinstance(exc, _TRANSIENT) or isinstance(getattr(exc, "orig", None), _TRANSIENT)


def is_permanent_error(exc: BaseException) -> bool:
    """True for an error the database will raise again for the same data, whatever the
    retries: a constraint or data error (``DataError``, ``IntegrityError``, wrapped by
    SQLAlchemy or not), or a ``ValueError``/``TypeError`` the driver raises before sending
    (psycopg2: "A string literal cannot contain NUL (0x00) characters").

    Neither transient nor permanent (a ``ProgrammingError`` such as a missing table, a
    bug): the caller must treat it as infrastructure, held and visible, because it is
    just as likely to refuse every message as one, and dead-lettering them all would be
    the worse mistake.
    """
    if is_transient_error(exc):
        return False
    if isinstance(exc, DataError | IntegrityError):
        return True
    if isinstance(exc, DBAPIError):  # another DBAPI class: decided by the driver's error
        return _PERMANENT_DBAPI.intersection(c.__name__ for c in type(exc.orig).__mro__) != set()
    cause = exc.orig if isinstance(exc, StatementError) else exc
    if _PERMANENT_DBAPI.intersection(c.__name__ for c in type(cause).__mro__):
        return True
    # A plain ValueError/TypeError, not some driver class deriving from them.
    return type(cause).__module__ == "builtins" and isinstance(cause, ValueError | TypeError)

"""Engine creation with the per-dialect settings the state stores rely on."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import (
    ArgumentError,
    DataError,
    DBAPIError,
    DisconnectionError,
    IntegrityError,
    InterfaceError,
    NoSuchModuleError,
    OperationalError,
    StatementError,
)
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from sqlalchemy.pool import StaticPool

from sharedstream.core.install import pip_install
from sharedstream.statestore.settings import SQLITE_BUSY_TIMEOUT_S


def _sqlite_pragmas(busy_timeout: float) -> Callable[[Any, Any], None]:
    """The ``connect`` listener: the pragmas every SQLite connection needs."""
    millis = round(busy_timeout * 1000)

    def apply(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        # Foreign keys are off by default in SQLite: ON DELETE CASCADE needs them. WAL lets
        # readers run while cleanup deletes; busy_timeout waits for a writer instead of
        # failing at once (past it the statement fails, "database is locked", and is retried).
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={millis}")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.close()

    return apply


class DatabaseURLError(ValueError):
    """A database URL that cannot work: a wrong scheme, a missing driver, a missing file.
    The message says what to fix and never shows the password."""


# The scheme and extra of sharedstream's driver for each driver a URL may name.
_OUR_DRIVER = {"psycopg": ("postgresql+psycopg", "postgres"),
               "psycopg2": ("postgresql+psycopg", "postgres"),
               "pymysql": ("mysql+pymysql", "mysql"), "mysqldb": ("mysql+pymysql", "mysql")}
# Schemes other tools accept that SQLAlchemy does not, and what to write instead.
_SCHEME_FIXES = {"postgres": "postgresql+psycopg", "postgresql": "postgresql+psycopg",
                 "mysql": "mysql+pymysql", "mariadb": "mysql+pymysql"}


def make_engine(url: str, *, must_exist: bool = False,
                sqlite_busy_timeout: float = SQLITE_BUSY_TIMEOUT_S, **kwargs: Any) -> Engine:
    """An engine for ``url``; a :class:`DatabaseURLError` for a URL that cannot work.

    ``must_exist``: a SQLite file must be there already (commands that read must not
    create an empty database at a mistyped path). ``sqlite_busy_timeout``: seconds a
    SQLite connection waits for a lock another connection holds.
    """
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise DatabaseURLError("the database URL is not a URL: write it as "
                               "dialect+driver://user:password@host/database") from None
    shown = parsed.render_as_string(hide_password=True)
    if parsed.drivername in ("postgres", "postgresql", "mysql", "mariadb") and (
            parsed.drivername == "postgres" or _missing_default_driver(parsed.drivername)):
        fix = _SCHEME_FIXES[parsed.drivername]
        raise DatabaseURLError(f"database URL {shown}: write {fix}:// (sharedstream's "
                               f"driver) instead of {parsed.drivername}://")
    if parsed.get_backend_name() == "sqlite" and must_exist and parsed.database not in (
            None, "", ":memory:") and not Path(parsed.database).is_file():
        raise DatabaseURLError(f"database file not found: {parsed.database} (check [database] "
                               "url or --database-url; `sharedstream db upgrade` creates it)")
    try:
        return _engine(parsed, sqlite_busy_timeout, **kwargs)
    except NoSuchModuleError:
        raise DatabaseURLError(f"database URL {shown}: unknown dialect or driver "
                               f"{parsed.drivername!r}") from None
    except ModuleNotFoundError as exc:
        ours = _OUR_DRIVER.get(parsed.get_driver_name())
        hint = ""
        if ours is not None:
            scheme, extra = ours
            hint = f": {pip_install(extra)}"
            if not parsed.drivername.startswith(scheme):
                hint = f"; write {scheme}:// instead ({pip_install(extra)})"
        raise DatabaseURLError(f"database URL {shown} needs the Python module "
                               f"{exc.name!r}, which is not installed{hint}") from None


def _missing_default_driver(drivername: str) -> bool:
    """A bare ``postgresql://``/``mysql://`` picks a driver sharedstream does not install."""
    try:
        make_url(drivername + "://").get_dialect().import_dbapi()
    except ImportError:
        return True
    return False


def _engine(parsed: URL, sqlite_busy_timeout: float, **kwargs: Any) -> Engine:
    if parsed.get_backend_name() == "sqlite":
        if parsed.database in (None, "", ":memory:"):
            # One in-memory database shared by every thread, instead of one per connection.
            kwargs.setdefault("poolclass", StaticPool)
            kwargs.setdefault("connect_args", {"check_same_thread": False})
        engine = create_engine(parsed, **kwargs)
        event.listen(engine, "connect", _sqlite_pragmas(sqlite_busy_timeout))
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

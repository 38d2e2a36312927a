"""The unit-of-work writer's own connection: held between batches, few round trips.

The writer thread waits for the GIL after every round trip while the event loop's
thread runs, so a round trip costs far more than the network's time: with 500-event
batches on PostgreSQL, checking out a pooled connection (``pool_pre_ping``: one
``SELECT 1``), ``BEGIN``, the statement and ``COMMIT`` were each a wait of their own.
So the writer keeps one connection for its lifetime, and a batch that is a single
statement (events only, on PostgreSQL) runs in autocommit: that statement is its own
transaction, one round trip in all.

Failure windows:

* the held connection went stale while idle (server restarted, idle timeout): the
  batch's first statement fails as a disconnect; the work runs again at once on a
  fresh connection (whose checkout pings), once, as the pre-ping would have done. A
  second failure is the caller's, like any other.
* any other failure: the transaction is rolled back (an autocommit statement rolls
  itself back), the connection is dropped, and the error goes to the caller (the sink
  retries the batch). A connection lost during ``COMMIT`` leaves its outcome unknown;
  the retry is safe because events skip keys already there and state writes re-apply
  to the same values, as for any retried batch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError

T = TypeVar("T")


class WriterConnection:
    """One connection of ``engine`` for one thread's writes (not thread-safe)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._connection: Connection | None = None
        # One statement is its own transaction only where the dialect's autocommit
        # commits each statement atomically and durably (PostgreSQL).
        self._autocommit = engine.dialect.name == "postgresql"

    def run(self, work: Callable[[Connection], T], *, one_statement: bool = False) -> T:
        """``work(connection)`` in one committed transaction; ``one_statement`` says it
        runs a single statement, which may then commit on its own."""
        fresh = self._connection is None
        while True:
            connection = self._connection
            if connection is None:
                connection = self._connection = self._engine.connect()
            try:
                if one_statement and self._autocommit:
                    # Back to transactions after it; after a failure the pool resets it.
                    connection.execution_options(isolation_level="AUTOCOMMIT")
                    result = work(connection)
                    connection.commit()  # ends SQLAlchemy's autobegun marker, sends nothing
                    connection.execution_options(
                        isolation_level=connection.default_isolation_level)
                    return result
                with connection.begin():
                    return work(connection)
            except DBAPIError as exc:
                self.close()
                if fresh or not exc.connection_invalidated:
                    raise
                fresh = True  # stale while idle: once more, on a new connection
            except BaseException:
                self.close()
                raise

    def close(self) -> None:
        """Give the connection back (the pool discards it if it was invalidated)."""
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()

"""Readiness reasons (``/readyz``) that the running triggerer and ``deliver`` share.

Each function returns the reasons, empty when there is none, as the health server's
readiness check does (:mod:`sharedstream.triggerer.health`).
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from sharedstream.delivery.service import DeliveryService
from sharedstream.statestore import StateStore
from sharedstream.statestore.engine import describe_error


def database_problems(store: StateStore) -> list[str]:
    """Readiness reason of a process with no unit-of-work sink to watch the database for
    it (``deliver``): one round trip, made by the readiness request's own thread."""
    try:
        with store.engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except SQLAlchemyError as exc:
        return [f"database: {describe_error(exc)}"]
    return []


def destination_problems(delivery: DeliveryService) -> list[str]:
    """Readiness reasons: each destination this process delivers that is failing now."""
    return [f"destination {state.id}: failing ({state.last_error})"
            for state in delivery.states() if state.failing_since is not None]

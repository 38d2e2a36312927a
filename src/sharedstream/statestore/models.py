"""The tables sharedstream keeps, as SQLAlchemy Core ``Table`` objects (the Alembic
migrations build the same schema; tests/integration/statestore compares them).

Core, not the ORM's declarative classes: nothing maps rows to objects, and importing
``sqlalchemy.orm`` and declaring the classes was a fifth of ``sharedstream run``'s
start-up (issue 43)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

from sharedstream.statestore.types import JsonPayload, JsonText, UtcDateTime, utcnow

# Lengths keep every unique key under MySQL/InnoDB's 3072-byte index limit in utf8mb4.
NAME_LENGTH = 250
ID_LENGTH = 128
KEY_LENGTH = 250
GROUP_KEY_LENGTH = 500

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING)


def _id() -> Column[int]:
    """An autoincrementing BIGINT key (INTEGER on SQLite, whose rowid alias it must be)."""
    return Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True,
                  autoincrement=True)


def _required(name: str, *args: Any, **kw: Any) -> Column[Any]:
    """NOT NULL, as the declarative models' ``Mapped[T]`` made it."""
    return Column(name, *args, nullable=False, **kw)


def _optional(name: str, *args: Any, **kw: Any) -> Column[Any]:
    """NULL allowed, as ``Mapped[T | None]`` made it."""
    return Column(name, *args, nullable=True, **kw)


def _stamp(name: str, **kw: Any) -> Column[Any]:
    """A timestamp set to now on insert."""
    return Column(name, UtcDateTime, nullable=False, default=utcnow, **kw)


# SQLite would otherwise give a deleted highest id to the next asset, which would then
# show the events left under it (asset_event has no key to asset: migration 0006).
asset = Table(
    "asset", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    _required("name", String(NAME_LENGTH), unique=True),
    _optional("uri", Text),
    _required("active", Boolean, default=True),
    _optional("deactivated_at", UtcDateTime),
    _stamp("created_at"),
    _stamp("updated_at"),
    sqlite_autoincrement=True,
)

asset_state_store = Table(
    "asset_state_store", metadata,
    Column("asset_id", Integer, ForeignKey("asset.id", ondelete="CASCADE"),
           primary_key=True),
    Column("key", String(KEY_LENGTH), primary_key=True),
    _required("value", JsonText),
    # Bumped by every write; advance's compare-and-swap is "UPDATE ... WHERE version = :seen".
    _required("version", BigInteger, default=1),
    _stamp("updated_at"),
    _required("writer_kind", String(16)),
    _required("writer_id", String(NAME_LENGTH)),
    CheckConstraint("writer_kind IN ('task', 'watcher', 'api')", name="writer_kind"),
)

task_state_store = Table(
    "task_state_store", metadata,
    _id(),
    _required("dag_id", String(ID_LENGTH)),
    _required("run_id", String(NAME_LENGTH)),
    _required("task_id", String(ID_LENGTH)),
    _required("map_index", Integer, default=-1, server_default="-1"),
    _required("key", String(KEY_LENGTH)),
    # NULL when the payload lives in a [workers] state_backend and payload_ref points at it.
    _optional("value", JsonText),
    _optional("payload_ref", Text),
    _stamp("updated_at"),
    _optional("expires_at", UtcDateTime),
    UniqueConstraint("dag_id", "run_id", "task_id", "map_index", "key"),
    Index("ix_task_state_store_expires_at", "expires_at"),
    CheckConstraint("value IS NOT NULL OR payload_ref IS NOT NULL", name="value_or_ref"),
)

asset_event = Table(
    "asset_event", metadata,
    # Allocated by statestore.events.insert_events from event_sequence, in commit order.
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True,
           autoincrement=False),
    # No foreign key (migration 0006): its per-row check was a fifth of the insert's
    # server time; the writer's ids come from the asset table, delete_asset deletes events.
    _required("asset_id", Integer),
    _required("watcher", String(NAME_LENGTH)),
    # jsonb on PostgreSQL (migration 0008): queryable with its JSON operators.
    _required("payload", JsonPayload),
    _required("topic", String(NAME_LENGTH)),
    _required("topic_id", String(64)),
    _required("partition", Integer),
    _required("offset", BigInteger),
    _required("event_index", Integer),
    _stamp("created_at"),
    # The W3C trace context of the watch span that made the event (the tracing room), which
    # its delivery continues; NULL when tracing is off or the message was not sampled.
    _optional("trace_context", Text),
    UniqueConstraint("watcher", "topic_id", "partition", "offset", "event_index"),
    Index("ix_asset_event_created_at", "created_at"),
    Index("ix_asset_event_asset_id_id", "asset_id", "id"),
)

# The last ``asset_event.id`` handed out: ids are allocated from here, in commit order.
# One row. A writer takes its row lock (``UPDATE ... SET last_id = last_id + n``) as the
# last step of its transaction and holds it until it commits, so an id is never visible
# before every lower id is visible or rolled back: ``id > cursor`` reads miss nothing.
event_sequence = Table(
    "event_sequence", metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    _required("last_id", BigInteger),
)

# How far a destination has delivered: every event up to ``last_id`` is done.
delivery_cursor = Table(
    "delivery_cursor", metadata,
    Column("destination", String(NAME_LENGTH), primary_key=True),
    _required("last_id", BigInteger),
    _required("delivered", BigInteger, default=0),
    _stamp("updated_at"),
    # The process delivering for the destination, until when (see delivery.cursor).
    _optional("owner", String(64)),
    _optional("lease_until", UtcDateTime),
)

# An event a destination refused for good (or that was given up on), with why.
undelivered_event = Table(
    "undelivered_event", metadata,
    _id(),
    _required("destination", String(NAME_LENGTH)),
    _required("event_id", BigInteger().with_variant(Integer, "sqlite"),
              ForeignKey("asset_event.id", ondelete="CASCADE"), index=True),
    _required("reason", Text),
    _required("attempts", Integer, default=1),
    _stamp("created_at"),
    UniqueConstraint("destination", "event_id"),
)

# One running ``sharedstream run`` process: its heartbeat (see triggerer.heartbeat).
triggerer_process = Table(
    "triggerer_process", metadata,
    Column("id", String(64), primary_key=True),
    _required("host", String(NAME_LENGTH)),
    _required("pid", Integer),
    _required("version", String(64)),
    _required("watchers", JsonText),  # the watcher module sources
    _required("groups", JsonText),  # its consumer groups
    _optional("status_url", Text),  # its /status, if served
    _stamp("started_at"),
    _stamp("last_seen"),
)

# One console or CLI action: who (the token's name), what, on what, when, the result.
audit_entry = Table(
    "audit_entry", metadata,
    _id(),
    _stamp("at", index=True),
    _required("actor", String(NAME_LENGTH)),  # "console:<token>" or "cli:<user>"
    _required("action", String(64)),
    _required("target", Text),
    _required("ok", Boolean),
    _required("result", Text),
)

# A request that the triggerer holding a message hands it out again now; the triggerer
# takes (deletes) its requests at each heartbeat (see triggerer.heartbeat).
held_retry = Table(
    "held_retry", metadata,
    _id(),
    _required("triggerer_id", String(64), index=True),
    _required("consumer_group", Text),
    _required("topic", String(NAME_LENGTH)),
    _required("partition", Integer),
    _required("offset", BigInteger),
    _stamp("requested_at"),
)

rejected_message = Table(
    "rejected_message", metadata,
    _id(),
    _required("watcher", String(NAME_LENGTH)),
    _required("topic", String(NAME_LENGTH)),
    _required("topic_id", String(64)),
    _required("partition", Integer),
    _required("offset", BigInteger),
    _required("reason", Text),
    _optional("value_preview", Text),
    _stamp("created_at"),
    UniqueConstraint("watcher", "topic_id", "partition", "offset"),
)

# The declared watcher set of a shared-stream group (the triggerer's cohort check).
stream_group = Table(
    "stream_group", metadata,
    Column("group_key", String(GROUP_KEY_LENGTH), primary_key=True),
    _required("consumer_group", Text),
    _required("watchers", JsonText),
    _stamp("updated_at"),
)

# A message a watcher has not durably handled although it may have moved past it (failed,
# rejected before its dead letter was acknowledged): written in the unit of work of the
# watcher's next messages, so that after a crash the message goes to it again as a retry
# (``sharedstream.core.holds``). Rows are few: one per open hold.
watcher_hold = Table(
    "watcher_hold", metadata,
    Column("topic", String(NAME_LENGTH), primary_key=True),
    Column("partition", Integer, primary_key=True, autoincrement=False),
    Column("offset", BigInteger, primary_key=True, autoincrement=False),
    Column("watcher", String(NAME_LENGTH), primary_key=True),
    _required("consumer_group", Text),
    _stamp("created_at"),
)

tables = metadata.tables

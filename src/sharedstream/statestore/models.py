"""SQLAlchemy models of every table sharedstream keeps (one initial Alembic revision)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from sharedstream.statestore.types import JsonText, UtcDateTime, utcnow

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


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class AssetRow(Base):
    __tablename__ = "asset"
    # SQLite would otherwise give a deleted highest id to the next asset, which would then
    # show the events left under it (asset_event has no key to asset: migration 0006).
    __table_args__ = {"sqlite_autoincrement": True}

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(NAME_LENGTH), unique=True)
    uri: Mapped[str | None] = mapped_column(Text)
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    deactivated_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class AssetStateRow(Base):
    __tablename__ = "asset_state_store"
    __table_args__ = (
        CheckConstraint("writer_kind IN ('task', 'watcher', 'api')", name="writer_kind"),
    )

    asset_id: Mapped[int] = mapped_column(
        ForeignKey("asset.id", ondelete="CASCADE"), primary_key=True
    )
    key: Mapped[str] = mapped_column(String(KEY_LENGTH), primary_key=True)
    value: Mapped[str] = mapped_column(JsonText)
    # Bumped by every write; advance's compare-and-swap is "UPDATE ... WHERE version = :seen".
    version: Mapped[int] = mapped_column(BigInteger, default=1)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    writer_kind: Mapped[str] = mapped_column(String(16))
    writer_id: Mapped[str] = mapped_column(String(NAME_LENGTH))


class TaskStateRow(Base):
    __tablename__ = "task_state_store"
    __table_args__ = (
        UniqueConstraint("dag_id", "run_id", "task_id", "map_index", "key"),
        Index("ix_task_state_store_expires_at", "expires_at"),
        CheckConstraint("value IS NOT NULL OR payload_ref IS NOT NULL", name="value_or_ref"),
    )

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"),
                                    primary_key=True, autoincrement=True)
    dag_id: Mapped[str] = mapped_column(String(ID_LENGTH))
    run_id: Mapped[str] = mapped_column(String(NAME_LENGTH))
    task_id: Mapped[str] = mapped_column(String(ID_LENGTH))
    map_index: Mapped[int] = mapped_column(Integer, default=-1, server_default="-1")
    key: Mapped[str] = mapped_column(String(KEY_LENGTH))
    # NULL when the payload lives in a [workers] state_backend and payload_ref points at it.
    value: Mapped[str | None] = mapped_column(JsonText)
    payload_ref: Mapped[str | None] = mapped_column(Text)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime)


class AssetEventRow(Base):
    __tablename__ = "asset_event"
    __table_args__ = (
        UniqueConstraint("watcher", "topic_id", "partition", "offset", "event_index"),
        Index("ix_asset_event_created_at", "created_at"),
        Index("ix_asset_event_asset_id_id", "asset_id", "id"),
    )

    # Allocated by statestore.events.insert_events from event_sequence, in commit order.
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"),
                                    primary_key=True, autoincrement=False)
    # No foreign key (migration 0006): its per-row check was a fifth of the insert's
    # server time; the writer's ids come from the asset table, delete_asset deletes events.
    asset_id: Mapped[int] = mapped_column(Integer)
    watcher: Mapped[str] = mapped_column(String(NAME_LENGTH))
    payload: Mapped[str] = mapped_column(JsonText)
    topic: Mapped[str] = mapped_column(String(NAME_LENGTH))
    topic_id: Mapped[str] = mapped_column(String(64))
    partition: Mapped[int] = mapped_column(Integer)
    offset: Mapped[int] = mapped_column(BigInteger)
    event_index: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    # The W3C trace context of the watch span that made the event (core.tracing), which
    # its delivery continues; NULL when tracing is off or the message was not sampled.
    trace_context: Mapped[str | None] = mapped_column(Text)


class EventSequenceRow(Base):
    """The last ``asset_event.id`` handed out: ids are allocated from here, in commit order.

    One row. A writer takes its row lock (``UPDATE ... SET last_id = last_id + n``) as the
    last step of its transaction and holds it until it commits, so an id is never visible
    before every lower id is visible or rolled back: ``id > cursor`` reads miss nothing.
    """

    __tablename__ = "event_sequence"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    last_id: Mapped[int] = mapped_column(BigInteger)


class DeliveryCursorRow(Base):
    """How far a destination has delivered: every event up to ``last_id`` is done."""

    __tablename__ = "delivery_cursor"

    destination: Mapped[str] = mapped_column(String(NAME_LENGTH), primary_key=True)
    last_id: Mapped[int] = mapped_column(BigInteger)
    delivered: Mapped[int] = mapped_column(BigInteger, default=0)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    # The process delivering for the destination, until when (see delivery.cursor).
    owner: Mapped[str | None] = mapped_column(String(64))
    lease_until: Mapped[datetime | None] = mapped_column(UtcDateTime)


class UndeliveredEventRow(Base):
    """An event a destination refused for good (or that was given up on), with why."""

    __tablename__ = "undelivered_event"
    __table_args__ = (UniqueConstraint("destination", "event_id"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"),
                                    primary_key=True, autoincrement=True)
    destination: Mapped[str] = mapped_column(String(NAME_LENGTH))
    event_id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"),
        ForeignKey("asset_event.id", ondelete="CASCADE"), index=True)
    reason: Mapped[str] = mapped_column(Text)
    attempts: Mapped[int] = mapped_column(Integer, default=1)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class TriggererProcessRow(Base):
    """One running ``sharedstream run`` process: its heartbeat (see triggerer.heartbeat)."""

    __tablename__ = "triggerer_process"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    host: Mapped[str] = mapped_column(String(NAME_LENGTH))
    pid: Mapped[int] = mapped_column(Integer)
    version: Mapped[str] = mapped_column(String(64))
    watchers: Mapped[str] = mapped_column(JsonText)  # the watcher module sources
    groups: Mapped[str] = mapped_column(JsonText)  # its consumer groups
    status_url: Mapped[str | None] = mapped_column(Text)  # its /status, if served
    started_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    last_seen: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class AuditEntryRow(Base):
    """One console or CLI action: who (the token's name), what, on what, when, the result."""

    __tablename__ = "audit_entry"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"),
                                    primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow, index=True)
    actor: Mapped[str] = mapped_column(String(NAME_LENGTH))  # "console:<token>" or "cli:<user>"
    action: Mapped[str] = mapped_column(String(64))
    target: Mapped[str] = mapped_column(Text)
    ok: Mapped[bool] = mapped_column(Boolean)
    result: Mapped[str] = mapped_column(Text)


class HeldRetryRow(Base):
    """A request that the triggerer holding a message hands it out again now; the
    triggerer takes (deletes) its requests at each heartbeat (see triggerer.heartbeat)."""

    __tablename__ = "held_retry"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"),
                                    primary_key=True, autoincrement=True)
    triggerer_id: Mapped[str] = mapped_column(String(64), index=True)
    consumer_group: Mapped[str] = mapped_column(Text)
    topic: Mapped[str] = mapped_column(String(NAME_LENGTH))
    partition: Mapped[int] = mapped_column(Integer)
    offset: Mapped[int] = mapped_column(BigInteger)
    requested_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class RejectedMessageRow(Base):
    __tablename__ = "rejected_message"
    __table_args__ = (UniqueConstraint("watcher", "topic_id", "partition", "offset"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"),
                                    primary_key=True, autoincrement=True)
    watcher: Mapped[str] = mapped_column(String(NAME_LENGTH))
    topic: Mapped[str] = mapped_column(String(NAME_LENGTH))
    topic_id: Mapped[str] = mapped_column(String(64))
    partition: Mapped[int] = mapped_column(Integer)
    offset: Mapped[int] = mapped_column(BigInteger)
    reason: Mapped[str] = mapped_column(Text)
    value_preview: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class StreamGroupRow(Base):
    """The declared watcher set of a shared-stream group (the triggerer's cohort check)."""

    __tablename__ = "stream_group"

    group_key: Mapped[str] = mapped_column(String(GROUP_KEY_LENGTH), primary_key=True)
    consumer_group: Mapped[str] = mapped_column(Text)
    watchers: Mapped[str] = mapped_column(JsonText)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class WatcherHoldRow(Base):
    """A message a watcher has not durably handled although it may have moved past it
    (failed, rejected before its dead letter was acknowledged): written in the unit of
    work of the watcher's next messages, so that after a crash the message goes to it
    again as a retry (``sharedstream.core.holds``). Rows are few: one per open hold."""

    __tablename__ = "watcher_hold"

    topic: Mapped[str] = mapped_column(String(NAME_LENGTH), primary_key=True)
    partition: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    offset: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    watcher: Mapped[str] = mapped_column(String(NAME_LENGTH), primary_key=True)
    consumer_group: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


tables = Base.metadata.tables
asset = tables["asset"]
asset_state_store = tables["asset_state_store"]
task_state_store = tables["task_state_store"]
asset_event = tables["asset_event"]
rejected_message = tables["rejected_message"]
stream_group = tables["stream_group"]
event_sequence = tables["event_sequence"]
delivery_cursor = tables["delivery_cursor"]
undelivered_event = tables["undelivered_event"]
triggerer_process = tables["triggerer_process"]
audit_entry = tables["audit_entry"]
held_retry = tables["held_retry"]
watcher_hold = tables["watcher_hold"]


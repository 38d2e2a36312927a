"""Event delivery: commit-ordered event ids, destination cursors, undelivered events.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30

``event_sequence`` starts at the highest existing event id, so ids allocated from it
continue above every event already stored. ``ix_asset_event_asset_id_id`` replaces
the single-column index for ``follow(asset, since=cursor)`` reads. Existing
destinations start with no cursor (created at the first delivery run, from where its
``start`` option says).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    # Ids now come from event_sequence only: an insert that forgets one must fail, not
    # take a value the sequence hands out later (SQLite's rowid cannot be told so).
    dialect = op.get_bind().dialect.name
    if dialect == "postgresql":
        op.execute("ALTER TABLE asset_event ALTER COLUMN id DROP DEFAULT")
        op.execute("DROP SEQUENCE IF EXISTS asset_event_id_seq")
    elif dialect in ("mysql", "mariadb"):
        op.execute("ALTER TABLE asset_event MODIFY id BIGINT NOT NULL")
    op.create_table(
        "event_sequence",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("last_id", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_event_sequence"),
    )
    op.execute("INSERT INTO event_sequence (id, last_id) "
               "SELECT 1, COALESCE(MAX(id), 0) FROM asset_event")
    op.create_table(
        "delivery_cursor",
        sa.Column("destination", sa.String(250), nullable=False),
        sa.Column("last_id", sa.BigInteger(), nullable=False),
        sa.Column("delivered", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.Column("owner", sa.String(64), nullable=True),
        sa.Column("lease_until", TS, nullable=True),
        sa.PrimaryKeyConstraint("destination", name="pk_delivery_cursor"),
    )
    op.create_table(
        "undelivered_event",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("destination", sa.String(250), nullable=False),
        sa.Column("event_id", BIG_ID, nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.ForeignKeyConstraint(["event_id"], ["asset_event.id"], ondelete="CASCADE",
                                name="fk_undelivered_event_event_id_asset_event"),
        sa.PrimaryKeyConstraint("id", name="pk_undelivered_event"),
        sa.UniqueConstraint("destination", "event_id",
                            name="uq_undelivered_event_destination_event_id"),
    )
    op.create_index("ix_undelivered_event_event_id", "undelivered_event", ["event_id"])
    op.create_index("ix_asset_event_asset_id_id", "asset_event", ["asset_id", "id"])
    op.drop_index("ix_asset_event_asset_id", table_name="asset_event")


def downgrade() -> None:
    op.create_index("ix_asset_event_asset_id", "asset_event", ["asset_id"])
    op.drop_index("ix_asset_event_asset_id_id", table_name="asset_event")
    op.drop_table("undelivered_event")
    op.drop_table("delivery_cursor")
    op.drop_table("event_sequence")
    dialect = op.get_bind().dialect.name
    if dialect == "postgresql":
        op.execute("CREATE SEQUENCE asset_event_id_seq OWNED BY asset_event.id")
        op.execute("SELECT setval('asset_event_id_seq', COALESCE(MAX(id), 0) + 1, false) "
                   "FROM asset_event")
        op.execute("ALTER TABLE asset_event ALTER COLUMN id "
                   "SET DEFAULT nextval('asset_event_id_seq')")
    elif dialect in ("mysql", "mariadb"):
        op.execute("ALTER TABLE asset_event MODIFY id BIGINT NOT NULL AUTO_INCREMENT")

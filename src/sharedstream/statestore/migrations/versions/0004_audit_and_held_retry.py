"""The console's actions: the audit of every action, and requests to retry a held message.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "audit_entry",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("at", TS, nullable=False),
        sa.Column("actor", sa.String(250), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("target", sa.Text(), nullable=False),
        sa.Column("ok", sa.Boolean(), nullable=False),
        sa.Column("result", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_audit_entry"),
    )
    op.create_index("ix_audit_entry_at", "audit_entry", ["at"])
    op.create_table(
        "held_retry",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("triggerer_id", sa.String(64), nullable=False),
        sa.Column("consumer_group", sa.Text(), nullable=False),
        sa.Column("topic", sa.String(250), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("offset", sa.BigInteger(), nullable=False),
        sa.Column("requested_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_held_retry"),
    )
    op.create_index("ix_held_retry_triggerer_id", "held_retry", ["triggerer_id"])


def downgrade() -> None:
    op.drop_index("ix_held_retry_triggerer_id", table_name="held_retry")
    op.drop_table("held_retry")
    op.drop_index("ix_audit_entry_at", table_name="audit_entry")
    op.drop_table("audit_entry")

"""Initial schema: assets, state stores, asset events, rejected messages, stream groups.

Revision ID: 0001
Revises:
Create Date: 2025-01-01

Types are spelled out here rather than imported from the models, so a later change to a
model cannot silently rewrite what this revision creates.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
JSON_TEXT = sa.Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb")
BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "asset",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(250), nullable=False),
        sa.Column("uri", sa.Text(), nullable=True),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("deactivated_at", TS, nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_asset"),
        sa.UniqueConstraint("name", name="uq_asset_name"),
    )
    op.create_table(
        "asset_state_store",
        sa.Column("asset_id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(250), nullable=False),
        sa.Column("value", JSON_TEXT, nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.Column("writer_kind", sa.String(16), nullable=False),
        sa.Column("writer_id", sa.String(250), nullable=False),
        sa.CheckConstraint(
            "writer_kind IN ('task', 'watcher', 'api')",
            name="ck_asset_state_store_writer_kind",
        ),
        sa.ForeignKeyConstraint(
            ["asset_id"], ["asset.id"], ondelete="CASCADE",
            name="fk_asset_state_store_asset_id_asset",
        ),
        sa.PrimaryKeyConstraint("asset_id", "key", name="pk_asset_state_store"),
    )
    op.create_table(
        "task_state_store",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("dag_id", sa.String(128), nullable=False),
        sa.Column("run_id", sa.String(250), nullable=False),
        sa.Column("task_id", sa.String(128), nullable=False),
        sa.Column("map_index", sa.Integer(), server_default="-1", nullable=False),
        sa.Column("key", sa.String(250), nullable=False),
        sa.Column("value", JSON_TEXT, nullable=True),
        sa.Column("payload_ref", sa.Text(), nullable=True),
        sa.Column("updated_at", TS, nullable=False),
        sa.Column("expires_at", TS, nullable=True),
        sa.CheckConstraint(
            "value IS NOT NULL OR payload_ref IS NOT NULL",
            name="ck_task_state_store_value_or_ref",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_task_state_store"),
        sa.UniqueConstraint(
            "dag_id", "run_id", "task_id", "map_index", "key",
            name="uq_task_state_store_dag_id_run_id_task_id_map_index_key",
        ),
    )
    op.create_index("ix_task_state_store_expires_at", "task_state_store", ["expires_at"])
    op.create_table(
        "asset_event",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("asset_id", sa.Integer(), nullable=False),
        sa.Column("watcher", sa.String(250), nullable=False),
        sa.Column("payload", JSON_TEXT, nullable=False),
        sa.Column("topic", sa.String(250), nullable=False),
        sa.Column("topic_id", sa.String(64), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("offset", sa.BigInteger(), nullable=False),
        sa.Column("event_index", sa.Integer(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.ForeignKeyConstraint(
            ["asset_id"], ["asset.id"], ondelete="CASCADE", name="fk_asset_event_asset_id_asset"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_asset_event"),
        sa.UniqueConstraint(
            "watcher", "topic_id", "partition", "offset", "event_index",
            name="uq_asset_event_watcher_topic_id_partition_offset_event_index",
        ),
    )
    op.create_index("ix_asset_event_asset_id", "asset_event", ["asset_id"])
    op.create_index("ix_asset_event_created_at", "asset_event", ["created_at"])
    op.create_table(
        "rejected_message",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("watcher", sa.String(250), nullable=False),
        sa.Column("topic", sa.String(250), nullable=False),
        sa.Column("topic_id", sa.String(64), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("offset", sa.BigInteger(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("value_preview", sa.Text(), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_rejected_message"),
        sa.UniqueConstraint(
            "watcher", "topic_id", "partition", "offset",
            name="uq_rejected_message_watcher_topic_id_partition_offset",
        ),
    )
    op.create_table(
        "stream_group",
        sa.Column("group_key", sa.String(500), nullable=False),
        sa.Column("consumer_group", sa.Text(), nullable=False),
        sa.Column("watchers", JSON_TEXT, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("group_key", name="pk_stream_group"),
    )


def downgrade() -> None:
    # Dropping a table drops its indexes; dropping them first fails on MariaDB, where the
    # index on asset_event.asset_id backs the foreign key.
    op.drop_table("stream_group")
    op.drop_table("rejected_message")
    op.drop_table("asset_event")
    op.drop_table("task_state_store")
    op.drop_table("asset_state_store")
    op.drop_table("asset")

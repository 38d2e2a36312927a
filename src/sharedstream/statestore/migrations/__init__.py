"""Alembic environment of sharedstream's schema (run programmatically, see ``migrate``)."""

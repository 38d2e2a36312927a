"""Alembic revisions (a package so setuptools ships them in the wheel)."""

"""Fixtures of the fault suite: sizes (bounded or ``--full``), soak length, figures, processes.

Each scenario runs at a bounded size by default (CI: the whole suite in a few
minutes on two cores) and at a long size with ``--full``; ``--soak MINUTES``
makes the soak scenario run that long (both options are declared in
``tests/conftest.py``, so they work from the repository root too).

Figures every scenario records land in ``bench/results/faults.json`` (one
section per mode, a scenario's entry replaced by its latest run), which
``python -m tests.faults.report`` turns into the README's table.

Triggerer processes come from the e2e suite's harness (``tests/e2e/triggerer.py``),
never a second one: this file only adds a factory that kills leftovers.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

FAULTS = Path(__file__).resolve().parent
TESTS = FAULTS.parent
sys.path.insert(0, str(TESTS / "integration"))
sys.path.insert(0, str(TESTS / "e2e"))

from db_schemas import postgres_schema_url  # noqa: E402  (importable by path only)
from faultkit import Figures, Size  # noqa: E402
from triggerer import Triggerers, connection_for  # noqa: E402


@pytest.fixture(scope="session")
def size(pytestconfig: pytest.Config) -> Size:
    return Size(full=bool(pytestconfig.getoption("--full", default=False)),
                soak_minutes=float(pytestconfig.getoption("--soak", default=0.0) or 0.0))


@pytest.fixture(scope="session")
def figures(size: Size) -> Iterator[Figures]:
    collected = Figures("soak" if size.soak_minutes else size.mode)
    yield collected
    if collected.scenarios:
        collected.write()


@pytest.fixture
def pg_url(database_url: str) -> Iterator[str]:
    """A fresh PostgreSQL schema per test (the issue asks for PostgreSQL, never SQLite)."""
    yield from postgres_schema_url(database_url)


@pytest.fixture
def connection(kafka_bootstrap: str) -> dict[str, Any]:
    return connection_for(kafka_bootstrap, "faults")


@pytest.fixture
def triggerers(tmp_path: Path) -> Iterator[Triggerers]:
    """Factory of not yet started triggerers (own log dir each); kills leftovers at the end."""
    pool = Triggerers(tmp_path)
    yield pool
    pool.kill_all()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``--soak MINUTES`` outlasts the suite's per-test timeout (600 s): the soak scenario
    gets its own length plus ten minutes for start-up, draining and teardown."""
    minutes = float(config.getoption("--soak", default=0.0) or 0.0)
    if minutes:
        for item in items:
            if item.path.name == "test_soak.py":
                item.add_marker(pytest.mark.timeout(minutes * 60 + 600))

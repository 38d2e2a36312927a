"""The ``schema_registry`` fixtures: a real Confluent-compatible registry (Apicurio).

``schema_registry`` serves the session: ``SHAREDSTREAM_TEST_SCHEMA_REGISTRY_URL`` when
set (someone's running registry, its Confluent API base URL), else the project's local
one (``localservices.registry``: built once from Maven Central, up in about 3 s).
Subjects are per test (named after the test's topics), so tests never share a schema.

``stoppable_schema_registry`` is a test's own registry, for outage tests: stopping it
affects no other test, and ``restart()`` brings the same schema ids back.

A registry that cannot be built or started fails the test that asked for it, with the
build's or the registry's own output; it never skips.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from localservices import ServiceError
from localservices.registry import SchemaRegistry


def _started(workdir: Path | None) -> SchemaRegistry:
    registry = SchemaRegistry(workdir)
    try:
        registry.start()
    except ServiceError as error:
        failure = str(error)
    else:
        return registry
    registry.stop()
    pytest.fail(f"the schema registry (localservices.registry) could not be started: "
                f"{failure}", pytrace=False)


@pytest.fixture(scope="session")
def schema_registry() -> Iterator[str]:
    """The base URL of a real registry's Confluent API (``SchemaRegistryClient``'s url)."""
    external = os.environ.get("SHAREDSTREAM_TEST_SCHEMA_REGISTRY_URL")
    if external:
        yield external
        return
    registry = _started(None)
    yield registry.url
    registry.stop()


@pytest.fixture
def stoppable_schema_registry(tmp_path: Path) -> Iterator[SchemaRegistry]:
    """A registry of this test's own, to stop and restart (its schemas survive)."""
    registry = _started(tmp_path / "registry")
    yield registry
    registry.stop()

"""The ``schema_registry`` fixtures: a real Confluent-compatible registry (Apicurio).

``schema_registry`` serves the session: ``SHAREDSTREAM_TEST_SCHEMA_REGISTRY_URL`` when
set (someone's running registry, its Confluent API base URL), else the project's local
one (``localservices.registry``: built once from Maven Central, up in about 3 s).
Subjects are per test (named after the test's topics), so tests never share a schema.

``stoppable_schema_registry`` is the local registry itself, for outage tests: a test may
stop it (``.process.stop()``, SIGSTOP) and start it again, and the schemas survive
(``restart()`` keeps their ids). The tests of one session run one at a time, so an
outage reaches no other test; after each, the registry is brought back if the test
left it down. One process serves both fixtures: each registry start is 3 s of CI.

A registry that cannot be built or started fails the test that asked for it, with the
build's or the registry's own output; it never skips.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from localservices import ServiceError
from localservices.registry import SchemaRegistry


def _start(registry: SchemaRegistry) -> None:
    try:
        registry.start()
    except ServiceError as error:
        failure = str(error)
    else:
        return
    registry.process.stop()
    pytest.fail(f"the schema registry (localservices.registry) could not be started: "
                f"{failure}", pytrace=False)


@pytest.fixture(scope="session")
def _local_schema_registry() -> Iterator[SchemaRegistry]:
    registry = SchemaRegistry()
    _start(registry)
    yield registry
    registry.stop()


@pytest.fixture(scope="session")
def schema_registry(request: pytest.FixtureRequest) -> str:
    """The base URL of a real registry's Confluent API (``SchemaRegistryClient``'s url)."""
    external = os.environ.get("SHAREDSTREAM_TEST_SCHEMA_REGISTRY_URL")
    if external:
        return external
    local: SchemaRegistry = request.getfixturevalue("_local_schema_registry")
    return local.url


@pytest.fixture
def stoppable_schema_registry(_local_schema_registry: SchemaRegistry
                              ) -> Iterator[SchemaRegistry]:
    """The local registry, for this test to stop and start (its schemas survive)."""
    registry = _local_schema_registry
    yield registry
    if not registry.answers():
        registry.process.stop()  # stopped, or a process that no longer answers
        _start(registry)

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

from collections.abc import Iterator

import pytest
from localservices.registry import SchemaRegistry

from session_services import external_or_local, start_or_fail


def _start(registry: SchemaRegistry) -> None:
    start_or_fail(registry.start, registry.process.stop,
                  "the schema registry (localservices.registry)")


@pytest.fixture(scope="session")
def _local_schema_registry() -> Iterator[SchemaRegistry]:
    registry = SchemaRegistry()
    _start(registry)
    yield registry
    registry.stop()


@pytest.fixture(scope="session")
def schema_registry(request: pytest.FixtureRequest) -> str:
    """The base URL of a real registry's Confluent API (``SchemaRegistryClient``'s url)."""
    return external_or_local(request, "SHAREDSTREAM_TEST_SCHEMA_REGISTRY_URL",
                             "_local_schema_registry", lambda local: local.url)


@pytest.fixture
def stoppable_schema_registry(_local_schema_registry: SchemaRegistry
                              ) -> Iterator[SchemaRegistry]:
    """The local registry, for this test to stop and start (its schemas survive)."""
    registry = _local_schema_registry
    yield registry
    if not registry.answers():
        registry.process.stop()  # stopped, or a process that no longer answers
        _start(registry)

"""Where the real services come from, and the directory markers.

Each service fixture resolves, once per session and only when a test asks
for it (unit tests start nothing):

1. the environment: ``KAFKA_BOOTSTRAP_SERVERS``, ``SHAREDSTREAM_TEST_DATABASE_URL``,
   ``SHAREDSTREAM_TEST_MARIADB_URL`` (``scripts/test`` exports these after
   starting the services once for the whole run);
2. testcontainers, when a Docker engine answers (probed once, in about a
   millisecond when there is no socket at all);
3. the local services of ``scripts/localservices``: a real Kafka broker from
   Maven Central's jars, PostgreSQL and MariaDB from the OS packages.

A service that cannot be had fails the test that needs it, loudly, with the
reason; nothing is ever skipped for a missing service, in CI or elsewhere.
"""

from __future__ import annotations

import functools
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn, Protocol

import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic  # where the type stubs declare it

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS.parent / "scripts"))
# Test this checkout's code, also in the subprocesses tests start (pyproject's
# ``pythonpath`` covers this process), whatever checkout an editable install points at.
_SRC = str(TESTS.parent / "src")
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (_SRC, os.environ.get("PYTHONPATH")) if p)

from localservices import (  # noqa: E402  (importable by path only)
    KafkaBroker,
    MariaDBServer,
    PostgresServer,
)
from localservices.containers import (  # noqa: E402
    ContainerKafka,
    docker_engine_answers,
    mariadb_container,
    postgres_container,
)

from gc_guard import kafka_clients_in_cyclic_garbage  # noqa: E402
from otlp_collector import otlp_collector  # noqa: E402, F401  (the fixture, for every test)
from schema_registry import (  # noqa: E402, F401  (the fixtures, for every test)
    _local_schema_registry,
    schema_registry,
    stoppable_schema_registry,
)
from session_services import external_or_local  # noqa: E402

DIRECTORY_MARKERS = {
    "unit": "unit",
    "integration": "integration",
    "e2e": "e2e",
    "faults": "integration",
    "airflow": "integration",
}


def pytest_addoption(parser: pytest.Parser) -> None:
    """The fault suite's sizes (tests/faults): here so they work from the repository root."""
    group = parser.getgroup("faults")
    group.addoption("--full", action="store_true", default=False,
                    help="fault suite: run each scenario at its long size")
    group.addoption("--soak", type=float, default=0.0, metavar="MINUTES",
                    help="fault suite: run the soak scenario this many minutes")


@pytest.fixture(autouse=True)
def _no_kafka_client_left_to_the_collector() -> Iterator[None]:
    """Fail a test that leaves a live Kafka client in cyclic garbage (see gc_guard):
    in the product that is a process abort at a random later moment, and in this
    suite the abort of the whole run, blamed on whichever test runs next."""
    yield
    leaked = kafka_clients_in_cyclic_garbage()
    assert not leaked, (f"left {', '.join(leaked)} to the cyclic garbage collector: "
                        "close or release Kafka clients on the thread that made them")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test by its top-level directory, so ``-m unit`` needs no decorators."""
    for item in items:
        try:
            top = item.path.relative_to(TESTS).parts[0]
        except (ValueError, IndexError):
            continue
        marker = DIRECTORY_MARKERS.get(top)
        if marker is not None:
            item.add_marker(getattr(pytest.mark, marker))


@functools.cache
def _docker() -> bool:
    return docker_engine_answers()


def _unavailable(service: str, error: BaseException) -> NoReturn:
    """Fail (never skip) a test whose service is missing."""
    where = "in CI" if os.environ.get("CI") else "here"
    pytest.fail(
        f"{service} is needed by this test but could not be started {where}: "
        f"{type(error).__name__}: {error}\n"
        "Run the suite with scripts/test, or point the test at a running service "
        "(KAFKA_BOOTSTRAP_SERVERS, SHAREDSTREAM_TEST_DATABASE_URL, "
        "SHAREDSTREAM_TEST_MARIADB_URL).",
        pytrace=False,
    )


class BrokerControl(Protocol):
    """What fault tests may do with the broker: take it away and bring it back."""

    @property
    def bootstrap(self) -> str: ...

    def restart(self) -> None: ...


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[BrokerControl]:
    """A Kafka broker this test run controls (can be stopped and restarted).

    Under ``scripts/test`` it is the broker that script started, taken over
    through its state file (``SHAREDSTREAM_KAFKA_STATE``). A broker given only
    as ``KAFKA_BOOTSTRAP_SERVERS`` is someone else's: tests that request this
    fixture fail rather than restart it.
    """
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    state = os.environ.get("SHAREDSTREAM_KAFKA_STATE")
    if external:
        if state and Path(state).exists():
            adopted = KafkaBroker.from_state(Path(state))
            if adopted.bootstrap == external:
                yield adopted
                return
        pytest.fail(f"this test controls the broker, but KAFKA_BOOTSTRAP_SERVERS={external} "
                    "is an external one; unset it (or use scripts/test)", pytrace=False)
    if _docker():
        container = ContainerKafka()
        try:
            container.start()
        except Exception as error:
            _unavailable("Kafka (testcontainers)", error)
        yield container
        container.stop()
        return
    broker = KafkaBroker()
    try:
        broker.start()
    except Exception as error:
        broker.stop()
        _unavailable("Kafka (local broker)", error)
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def kafka_bootstrap(request: pytest.FixtureRequest) -> str:
    """``bootstrap.servers`` of a real Apache Kafka broker (never the mock cluster)."""
    return external_or_local(request, "KAFKA_BOOTSTRAP_SERVERS", "kafka_broker",
                             lambda broker: broker.bootstrap)


@pytest.fixture(scope="session")
def kafka_admin(kafka_bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": kafka_bootstrap})


@pytest.fixture
def create_topic(kafka_admin: AdminClient,
                 request: pytest.FixtureRequest) -> Iterator[Callable[..., str]]:
    """Factory: ``create_topic("orders", partitions=3) -> "orders-<test>-<random>"``.

    Auto-creation is off on the test brokers, so tests create what they use.
    Names are unique per call (tests never see each other's data, even when
    a session reuses one broker). The call returns once every partition has
    a leader, so producing right away cannot hit UNKNOWN_TOPIC_OR_PART.
    Topics are deleted after the test (best effort: deletion is asynchronous).
    """
    created: list[str] = []
    test = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60].strip("-")

    def create(base: str = "topic", partitions: int = 1,
               config: dict[str, str] | None = None, timeout: float = 30.0) -> str:
        name = f"{base}-{test}-{uuid.uuid4().hex[:8]}"
        futures = kafka_admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1,
                      config=config or {})],
            operation_timeout=timeout)
        futures[name].result(timeout=timeout)
        created.append(name)
        deadline = time.monotonic() + timeout
        while True:
            meta = kafka_admin.list_topics(topic=name, timeout=5.0).topics.get(name)
            if (meta is not None and meta.error is None and len(meta.partitions) == partitions
                    and all(p.leader >= 0 for p in meta.partitions.values())):
                return name
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {name}: partitions without a leader after {timeout}s")
            time.sleep(0.05)

    yield create
    if created:
        kafka_admin.delete_topics(created, operation_timeout=10)


def _database(env_var: str, service: str, local: Callable[[], Any],
              container: Callable[[], tuple[Any, str]]) -> Iterator[str]:
    """Shared resolution for the two SQL databases (env, containers, local)."""
    url = os.environ.get(env_var)
    if url:
        yield url
        return
    if _docker():
        try:
            started, url = container()
        except Exception as error:
            _unavailable(f"{service} (testcontainers)", error)
        yield url
        started.stop()
        return
    server = local()
    try:
        server.start()
        url = server.create_database()
    except Exception as error:
        server.stop()
        _unavailable(f"{service} (local server)", error)
    yield url
    server.stop()


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    """SQLAlchemy URL (``postgresql+psycopg://``) of a throwaway PostgreSQL database."""
    yield from _database("SHAREDSTREAM_TEST_DATABASE_URL", "PostgreSQL", PostgresServer,
                         postgres_container)


@pytest.fixture(scope="session")
def mariadb_url() -> Iterator[str]:
    """SQLAlchemy URL (``mysql+pymysql://``) of a throwaway MariaDB database."""
    yield from _database("SHAREDSTREAM_TEST_MARIADB_URL", "MariaDB", MariaDBServer,
                         mariadb_container)


@pytest.fixture
def stoppable_postgres() -> Iterator[PostgresServer]:
    """A dedicated throwaway PostgreSQL server a test may stop and start (outage tests).

    Never the session's server: stopping it affects no other test. ``server.process.stop()``
    is a fast shutdown (every connection cut); ``server.start()`` brings the same data back
    on the same port.
    """
    server = PostgresServer()
    try:
        server.start()
    except Exception as error:
        server.stop()
        _unavailable("a dedicated PostgreSQL (local server)", error)
    yield server
    server.stop()

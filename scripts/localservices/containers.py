"""The same services through testcontainers, for machines with a Docker engine.

Only imported when ``docker_engine_answers()`` says an engine is there, so a
machine without Docker never pays for (or trips over) the Docker SDK.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any
from urllib.parse import urlparse

from confluent_kafka.admin import AdminClient

from ._process import ServiceError, free_port

KAFKA_IMAGE = "apache/kafka:4.3.0"
POSTGRES_IMAGE = "postgres:16"
MARIADB_IMAGE = "mariadb:11.4"


def docker_engine_answers(timeout: float = 1.0) -> bool:
    """True when a Docker engine answers ``/_ping`` on ``$DOCKER_HOST`` or the
    default socket; a missing socket costs one ``stat``, a dead one ``timeout``.
    Docker contexts (``docker context use``) are not consulted: set DOCKER_HOST."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    url = urlparse(host)
    try:
        if url.scheme == "unix":
            if not os.path.exists(url.path):
                return False
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            sock.connect(url.path)
        elif url.scheme == "tcp" and url.hostname and url.port:
            sock = socket.create_connection((url.hostname, url.port), timeout=timeout)
        else:
            # ssh:// and friends were configured on purpose: hand them to
            # testcontainers, which fails loudly if the engine is not there.
            return True
        with sock:
            sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            return sock.recv(64).startswith((b"HTTP/1.0 200", b"HTTP/1.1 200"))
    except Exception:  # any failure to reach an engine means "no engine"
        return False


class ContainerKafka:
    """Apache Kafka's official image, single-node KRaft, restartable in place.

    The container port is published on the *same* host port so the advertised
    listener is known before start and survives ``restart()`` (a stopped and
    started container keeps its file system, hence its log dir and cluster id).
    Failure window: like ``free_port()``, another process may take the port
    between choosing and publishing it.
    """

    def __init__(self) -> None:
        from testcontainers.core.container import DockerContainer

        self.port = free_port()
        self.container: Any = (
            DockerContainer(KAFKA_IMAGE)
            .with_bind_ports(self.port, self.port)
            .with_env("KAFKA_NODE_ID", "1")
            .with_env("KAFKA_PROCESS_ROLES", "broker,controller")
            .with_env("KAFKA_LISTENERS",
                      f"PLAINTEXT://0.0.0.0:{self.port},CONTROLLER://localhost:9093")
            .with_env("KAFKA_ADVERTISED_LISTENERS", f"PLAINTEXT://127.0.0.1:{self.port}")
            .with_env("KAFKA_CONTROLLER_LISTENER_NAMES", "CONTROLLER")
            .with_env("KAFKA_LISTENER_SECURITY_PROTOCOL_MAP",
                      "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT")
            .with_env("KAFKA_CONTROLLER_QUORUM_VOTERS", "1@localhost:9093")
            .with_env("KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR", "1")
            .with_env("KAFKA_OFFSETS_TOPIC_NUM_PARTITIONS", "3")
            .with_env("KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR", "1")
            .with_env("KAFKA_TRANSACTION_STATE_LOG_MIN_ISR", "1")
            .with_env("KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR", "1")
            .with_env("KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR", "1")
            .with_env("KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS", "0")
            .with_env("KAFKA_GROUP_MIN_SESSION_TIMEOUT_MS", "1000")
            .with_env("KAFKA_AUTO_CREATE_TOPICS_ENABLE", "false")
            .with_env("KAFKA_HEAP_OPTS", "-Xmx512m -Xms512m")
        )

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _wait(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        while time.monotonic() < deadline:
            try:
                if admin.list_topics(timeout=2.0).brokers:
                    return
            except Exception:  # KafkaException: not listening yet
                pass
            time.sleep(0.5)
        raise ServiceError(f"Kafka container at {self.bootstrap} not ready after {timeout}s")

    def start(self) -> None:
        self.container.start()
        self._wait()

    def stop(self) -> None:
        self.container.stop()

    def restart(self) -> None:
        wrapped = self.container.get_wrapped_container()
        wrapped.stop(timeout=30)
        wrapped.start()
        self._wait()


def postgres_container() -> tuple[Any, str]:
    """A started PostgreSQL container and its SQLAlchemy (psycopg 3) URL."""
    try:
        from testcontainers.community.postgres import PostgresContainer
    except ImportError:  # older testcontainers releases kept modules at top level
        from testcontainers.postgres import PostgresContainer

    container = PostgresContainer(POSTGRES_IMAGE, driver="psycopg").start()
    return container, str(container.get_connection_url())


def mariadb_container() -> tuple[Any, str]:
    """A started MariaDB container and its SQLAlchemy (PyMySQL) URL."""
    try:
        from testcontainers.community.mysql import MySqlContainer
    except ImportError:  # older testcontainers releases kept modules at top level
        from testcontainers.mysql import MySqlContainer

    container = MySqlContainer(MARIADB_IMAGE, dialect="pymysql").start()
    return container, str(container.get_connection_url())


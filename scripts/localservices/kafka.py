"""A real single-node Apache Kafka broker (KRaft) for tests, without Docker.

The server jars come from Maven Central through Maven (pinned
``org.apache.kafka:kafka_2.13:4.3.0`` plus a log4j2 binding), copied once into
``~/.cache/sharedstream/kafka-4.3.0/libs`` and reused: a ``.complete`` stamp
written after the copy marks a usable cache, so a run interrupted mid-download
never leaves a half cache that looks whole. ``SHAREDSTREAM_CACHE_DIR``
overrides the cache root.

The broker is combined broker+controller on two free loopback ports, formatted
once per log dir. ``restart()`` keeps the ports and the log dir, so fault tests
can take the broker away mid-stream and bring the same cluster back.

Secured brokers: ``sasl_ssl=[SaslSslListener("SASL_SSL", keystore), ...]`` adds one
SASL_SSL listener per entry (SCRAM-SHA-512 logins over TLS with that PEM keystore, see
``localservices.tls``) on its own free port, beside the PLAINTEXT one (which stays the
inter-broker listener and what ``answers()`` probes); ``scram_users`` are the SCRAM
credentials, written into the cluster's metadata by ``kafka-storage format --add-scram``.
Several listeners may carry different certificates (a good one, an expired one).
"""

from __future__ import annotations

import base64
import functools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import AdminClient

from ._process import (
    ManagedProcess,
    ServiceError,
    cached_build,
    free_port,
    maven,
    run_checked,
    wait_until,
)

KAFKA_VERSION = "4.3.0"
SCALA_VERSION = "2.13"
LOG4J_VERSION = "2.25.3"
HEAP = "512m"

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>sharedstream.local</groupId>
  <artifactId>kafka-server-jars</artifactId>
  <version>{kafka}</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_{scala}</artifactId>
      <version>{kafka}</version>
    </dependency>
    <!-- Kafka logs through slf4j 1.7; the broker distribution binds it to log4j2. -->
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>{log4j}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-core</artifactId>
      <version>{log4j}</version>
    </dependency>
  </dependencies>
</project>
"""

# Everything to stdout, which ManagedProcess sends to kafka.log, so JVM start-up
# errors and broker logs end up in the one file the start-up error quotes.
_LOG4J2 = """status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = out
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.controller.name = state.change.logger
logger.controller.level = WARN
"""


def cache_root() -> Path:
    base = os.environ.get("SHAREDSTREAM_CACHE_DIR")
    return Path(base) if base else Path.home() / ".cache" / "sharedstream"


def kafka_libs(version: str = KAFKA_VERSION) -> Path:
    """Directory of the broker's jars, fetched with Maven on first use.

    Concurrent callers (two test sessions) serialise on a lock file; the jars
    are copied into a scratch directory and renamed into place, then stamped.
    """
    home = cache_root() / f"kafka-{version}"
    libs = home / "libs"

    def fetch(scratch: Path) -> str:
        mvn = maven("fetch the Kafka jars")
        (scratch / "pom.xml").write_text(
            _POM.format(kafka=version, scala=SCALA_VERSION, log4j=LOG4J_VERSION))
        run_checked(
            [mvn, "-B", "-q", "-f", str(scratch / "pom.xml"),
             "dependency:copy-dependencies", "-DincludeScope=runtime",
             f"-DoutputDirectory={scratch / 'libs'}"],
            timeout=900,
        )
        if not any((scratch / "libs").glob(f"kafka_{SCALA_VERSION}-{version}.jar")):
            raise ServiceError(f"Maven finished but kafka_{SCALA_VERSION}-{version}.jar "
                               f"is missing from {scratch / 'libs'}")
        if libs.exists():
            shutil.rmtree(libs)
        (scratch / "libs").rename(libs)
        (home / "pom.xml").write_text((scratch / "pom.xml").read_text())
        return "\n".join(sorted(p.name for p in libs.glob("*.jar"))) + "\n"

    cached_build(home, "fetch-", fetch)
    return libs


def find_java() -> str:
    """The ``java`` to run the broker with: ``$JAVA_HOME/bin/java`` or PATH; 17+."""
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).exists():
        raise ServiceError("Java 17+ is needed for the local Kafka broker; install "
                           "openjdk-17-jre-headless or set JAVA_HOME")
    out = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
    match = re.search(r'version "(\d+)', out)
    if not match or int(match.group(1)) < 17:
        raise ServiceError(f"Kafka {KAFKA_VERSION} needs Java 17+, {java} says: {out.strip()}")
    return java


@dataclass(frozen=True)
class SaslSslListener:
    """An extra listener: SASL_SSL with SCRAM-SHA-512, TLS from ``keystore``.

    ``name`` is the listener's name (``SASL_SSL``, ``EXPIRED``: letters, digits and
    underscores); ``keystore`` a PEM file with the unencrypted PKCS#8 private key
    followed by the certificate chain (``tls.ServerCertificate.keystore``).
    """

    name: str
    keystore: Path


SCRAM_MECHANISM = "SCRAM-SHA-512"
_SIMPLE = re.compile(r"[A-Za-z0-9_.\-]+")
_LISTENER_NAME = re.compile(r"[A-Z][A-Z0-9_]*")


def _kafka_uuid() -> str:
    """A cluster id in Kafka's own format: URL-safe base64 of 16 random bytes."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):  # Kafka refuses ids that look like options
            return text


class KafkaBroker:
    """One combined broker+controller KRaft node on 127.0.0.1.

    ``workdir`` holds ``server.properties``, the log dir and ``kafka.log``;
    a temporary directory is created when omitted (and removed by ``stop()``
    when ``cleanup=True``). ``owner_pid`` is the process whose death takes
    the broker down (see ``_process.ManagedProcess``): this process when
    None, nobody when 0 (a detached broker, stopped through its state file).
    ``settings`` adds or overrides ``server.properties`` entries (a test broker
    with a static option changed, e.g. ``offset.metadata.max.bytes``).
    ``sasl_ssl`` and ``scram_users`` (username -> password) add secured listeners
    (see the module doc); ``bootstrap_of(name)`` is the address of one.
    """

    def __init__(self, workdir: Path | None = None, *, port: int | None = None,
                 controller_port: int | None = None, heap: str = HEAP,
                 owner_pid: int | None = None, cleanup: bool | None = None,
                 state_file: Path | None = None,
                 settings: Mapping[str, str] | None = None,
                 sasl_ssl: Sequence[SaslSslListener] = (),
                 scram_users: Mapping[str, str] | None = None) -> None:
        self._own_workdir = workdir is None
        self.workdir = Path(tempfile.mkdtemp(prefix="sharedstream-kafka-")) if workdir is None \
            else workdir
        self.cleanup = self._own_workdir if cleanup is None else cleanup
        self.port = port or free_port()
        self.controller_port = controller_port or free_port()
        self.heap = heap
        self.log_dir = self.workdir / "data"
        self.config_path = self.workdir / "server.properties"
        self.process = ManagedProcess(
            "kafka", self.workdir / "kafka.log",
            owner_pid=os.getpid() if owner_pid is None else (owner_pid or None),
            stop_signal=signal.SIGTERM, stop_timeout=30.0,
        )
        self.state_file = state_file
        self.settings = dict(settings or {})
        self.sasl_ssl = list(sasl_ssl)
        self.scram_users = dict(scram_users or {})
        for listener in self.sasl_ssl:
            if not _LISTENER_NAME.fullmatch(listener.name) or listener.name in (
                    "PLAINTEXT", "CONTROLLER"):
                raise ValueError(f"listener name {listener.name!r}: upper-case letters, "
                                 "digits and _, not PLAINTEXT or CONTROLLER")
        for user, password in self.scram_users.items():
            # kafka-storage's --add-scram syntax has no escaping worth relying on.
            if not (_SIMPLE.fullmatch(user) and _SIMPLE.fullmatch(password)):
                raise ValueError(f"SCRAM user {user!r}: names and passwords of letters, "
                                 "digits, '.', '_' and '-' only")
        self.listener_ports = {listener.name: free_port() for listener in self.sasl_ssl}
        self.start_seconds: float | None = None

    @classmethod
    def from_state(cls, state_file: Path) -> KafkaBroker:
        """Take over a broker started by another process (``scripts/kafka-local``).

        This is how tests under ``scripts/test`` restart the broker that script
        started: same ports, same log dir, and the state file keeps pointing at
        whichever process is current, so ``kafka-local stop`` still finds it.
        """
        state = json.loads(state_file.read_text())
        broker = cls(Path(state["workdir"]), port=state["port"],
                     controller_port=state["controller_port"], heap=state["heap"],
                     owner_pid=state["owner_pid"], cleanup=state["cleanup"],
                     state_file=state_file)
        broker.process.adopt(state["pid"])
        return broker

    def _save_state(self) -> None:
        if self.state_file is None:
            return
        state = {"workdir": str(self.workdir), "port": self.port,
                 "controller_port": self.controller_port, "heap": self.heap,
                 "owner_pid": self.process.owner_pid or 0, "cleanup": self.cleanup,
                 "pid": self.process.pid, "bootstrap": self.bootstrap}
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        scratch = self.state_file.with_suffix(".tmp")
        scratch.write_text(json.dumps(state, indent=2) + "\n")
        scratch.replace(self.state_file)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def bootstrap_of(self, listener: str) -> str:
        """The address of the SASL_SSL listener named ``listener``."""
        return f"127.0.0.1:{self.listener_ports[listener]}"

    @property
    def log_path(self) -> Path:
        return self.process.log_path

    def _write_config(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        settings = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},"
                         f"CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.log_dir),
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            "delete.topic.enable": "true",
            # One node: every internal topic must live with a single replica.
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "3",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "3",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            # Tests start consumers and expect assignment at once, and crash
            # tests use short session timeouts so a killed member leaves fast.
            "group.initial.rebalance.delay.ms": "0",
            "group.min.session.timeout.ms": "1000",
            "group.consumer.min.session.timeout.ms": "1000",
            "group.consumer.min.heartbeat.interval.ms": "500",
            **self._secured_settings(),
            **self.settings,
        }
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        (self.workdir / "log4j2.properties").write_text(_LOG4J2)

    def _secured_settings(self) -> dict[str, str]:
        """The extra listeners' entries: appended to the PLAINTEXT ones, each with its own
        SCRAM login module and PEM keystore (per-listener ``listener.name.<name>.*``)."""
        if not self.sasl_ssl:
            return {}
        extra = "".join(f",{name}://127.0.0.1:{port}"
                        for name, port in self.listener_ports.items())
        out = {
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},"
                         f"CONTROLLER://127.0.0.1:{self.controller_port}{extra}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}{extra}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
                                              + "".join(f",{name}:SASL_SSL"
                                                        for name in self.listener_ports),
            "sasl.enabled.mechanisms": SCRAM_MECHANISM,
        }
        for listener in self.sasl_ssl:
            prefix = f"listener.name.{listener.name.lower()}."
            out[prefix + "sasl.enabled.mechanisms"] = SCRAM_MECHANISM
            out[prefix + f"{SCRAM_MECHANISM.lower()}.sasl.jaas.config"] = \
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            out[prefix + "ssl.keystore.type"] = "PEM"
            out[prefix + "ssl.keystore.location"] = str(listener.keystore)
        return out

    def _java(self, main: str, *args: str) -> list[str]:
        return [
            find_java(), f"-Xmx{self.heap}", f"-Xms{self.heap}", "-XX:+UseG1GC",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={self.workdir}",
            "-cp", str(kafka_libs() / "*"), main, *args,
        ]

    def _format(self) -> None:
        if (self.log_dir / "meta.properties").exists():
            return
        scram = [arg for user, password in sorted(self.scram_users.items())
                 for arg in ("--add-scram",
                             f"{SCRAM_MECHANISM}=[name={user},password={password}]")]
        run_checked(self._java("kafka.tools.StorageTool", "format", "--ignore-formatted",
                               "-t", _kafka_uuid(), "-c", str(self.config_path), *scram))

    def start(self, timeout: float = 90.0) -> None:
        """Format (first time only), launch, and wait until metadata answers."""
        began = time.monotonic()
        kafka_libs()
        self._write_config()
        self._format()
        self.process.spawn(self._java("kafka.Kafka", str(self.config_path)))
        self._save_state()
        wait_until(self.answers, timeout=timeout, what=f"Kafka at {self.bootstrap}",
                   alive=self.process.running, log_path=self.log_path)
        for name, port in self.listener_ports.items():
            wait_until(functools.partial(self._accepts, port), timeout=timeout,
                       what=f"Kafka's {name} listener at {self.bootstrap_of(name)}",
                       alive=self.process.running, log_path=self.log_path)
        self.start_seconds = time.monotonic() - began

    @staticmethod
    def _accepts(port: int) -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
        except OSError:
            return False
        return True

    def answers(self) -> bool:
        """True when the broker returns cluster metadata with itself in it."""
        # A plain TCP probe first: librdkafka would log every refused connection.
        if not self._accepts(self.port):
            return False
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "socket.timeout.ms": 1000,
                             "log_level": 0})
        try:
            return bool(admin.list_topics(timeout=1.0).brokers)
        except Exception:  # KafkaException while the listener is not up yet
            return False

    def stop(self) -> None:
        """Controlled shutdown (SIGTERM), SIGKILL after 30 s; data kept unless cleanup."""
        self.process.stop()
        if self.state_file is not None:
            self.state_file.unlink(missing_ok=True)
        if self.cleanup:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def restart(self, timeout: float = 90.0) -> None:
        """Stop and start again on the same ports with the same log dir."""
        self.process.stop()
        self.start(timeout=timeout)

    def running(self) -> bool:
        return self.process.running()

"""A real Confluent-compatible schema registry for tests: Apicurio Registry, without Docker.

Apicurio Registry 2.0.2.Final is built here from Maven Central's artifacts with the
Quarkus Maven plugin (the project publishes no runnable jar), once per cache, into
``~/.cache/sharedstream/apicurio-registry-2.0.2.Final`` (``SHAREDSTREAM_CACHE_DIR``
overrides the root): a ``.complete`` stamp written after the build marks a usable
cache, and concurrent callers serialise on a lock file, as for the Kafka jars.

Why this version and these substitutions (each newer line was tried here and fails
to resolve from Maven Central: ``apicurio-registry-schema-util-provider`` and the
Quarkus ``apicurio-common-app-components-config-index-deployment`` are not served):

* 2.0.2.Final predates both modules; it runs on Quarkus 1.12 and Java 17;
* its JSON Schema checks use everit's ``org.everit.json.schema``, published under
  JitPack's coordinates only; the same library (same package, same API, its author's
  later release) is on Central as ``com.github.erosb:everit-json-schema``, which
  replaces it;
* the application jar carries no Jandex index, so the build indexes it itself, or
  Quarkus would find none of its REST resources.

The registry keeps its schemas in an H2 file in its work directory, so ``restart()``
(the outage tests) brings the same schema ids back. ``url`` is the base URL of its
Confluent API (``/apis/ccompat/v6``), the one ``SchemaRegistryClient`` takes.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

from ._process import (
    ManagedProcess,
    ServiceError,
    cached_build,
    free_port,
    maven,
    run_checked,
    wait_until,
)
from .kafka import cache_root, find_java

APICURIO_VERSION = "2.0.2.Final"
QUARKUS_VERSION = "1.12.2.Final"
EVERIT_VERSION = "1.14.4"
HEAP = "384m"

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>sharedstream.local</groupId>
  <artifactId>apicurio-registry-runner</artifactId>
  <version>{apicurio}</version>
  <packaging>jar</packaging>
  <properties>
    <project.build.sourceEncoding>UTF-8</project.build.sourceEncoding>
  </properties>
  <dependencyManagement>
    <dependencies>
      <dependency>
        <groupId>io.apicurio</groupId>
        <artifactId>apicurio-registry</artifactId>
        <version>{apicurio}</version>
        <type>pom</type>
        <scope>import</scope>
      </dependency>
    </dependencies>
  </dependencyManagement>
  <dependencies>
    <dependency>
      <groupId>io.apicurio</groupId>
      <artifactId>apicurio-registry-app</artifactId>
      <version>{apicurio}</version>
      <exclusions>
        <!-- JitPack only; the same library from Central below. -->
        <exclusion>
          <groupId>com.github.everit-org.json-schema</groupId>
          <artifactId>org.everit.json.schema</artifactId>
        </exclusion>
      </exclusions>
    </dependency>
    <dependency>
      <groupId>com.github.erosb</groupId>
      <artifactId>everit-json-schema</artifactId>
      <version>{everit}</version>
    </dependency>
  </dependencies>
  <build>
    <plugins>
      <plugin>
        <groupId>io.quarkus</groupId>
        <artifactId>quarkus-maven-plugin</artifactId>
        <version>{quarkus}</version>
        <executions>
          <execution>
            <goals><goal>build</goal></goals>
          </execution>
        </executions>
      </plugin>
    </plugins>
  </build>
</project>
"""

# Appended to the app's own settings at build time (see _app_properties): the app jar
# and its common module carry no Jandex index, and without one Quarkus finds none of
# their beans and REST resources.
_BUILD_PROPERTIES = """\
quarkus.index-dependency.registry-app.group-id=io.apicurio
quarkus.index-dependency.registry-app.artifact-id=apicurio-registry-app
quarkus.index-dependency.registry-common.group-id=io.apicurio
quarkus.index-dependency.registry-common.artifact-id=apicurio-registry-common
"""

CCOMPAT_PATH = "/apis/ccompat/v6"


def registry_runner(version: str = APICURIO_VERSION) -> Path:
    """The registry's runnable jar (its ``lib/`` beside it), built with Maven on first use.

    The first build downloads the registry's dependencies (about 150 MB into
    ``~/.m2``) and takes one to three minutes; later calls return at once.
    """
    home = cache_root() / f"apicurio-registry-{version}"
    jar = home / "runner" / f"apicurio-registry-runner-{version}-runner.jar"

    def build(scratch: Path) -> str:
        mvn = maven("build the schema registry")
        (scratch / "pom.xml").write_text(_POM.format(
            apicurio=version, quarkus=QUARKUS_VERSION, everit=EVERIT_VERSION))
        run_checked([mvn, "-B", "-q", "-f", str(scratch / "pom.xml"), "dependency:copy",
                     f"-Dartifact=io.apicurio:apicurio-registry-app:{version}",
                     f"-DoutputDirectory={scratch / 'app'}"], timeout=1200)
        resources = scratch / "src" / "main" / "resources"
        resources.mkdir(parents=True)
        (resources / "application.properties").write_text(
            _app_properties(scratch / "app" / f"apicurio-registry-app-{version}.jar")
            + "\n" + _BUILD_PROPERTIES)
        run_checked([mvn, "-B", "-q", "-f", str(scratch / "pom.xml"), "package",
                     "-DskipTests"], timeout=1200)
        built = scratch / "target"
        if not (built / jar.name).exists():
            raise ServiceError(f"Maven finished but {jar.name} is missing from {built}")
        runner = home / "runner"
        if runner.exists():
            shutil.rmtree(runner)
        runner.mkdir()
        (built / jar.name).rename(jar)
        (built / "lib").rename(runner / "lib")
        return f"{jar.name}\n"

    cached_build(home, "build-", build)
    return jar


def _app_properties(app_jar: Path) -> str:
    """The registry application's own ``application.properties``.

    Quarkus reads one ``application.properties``, the runner's: the app jar's (its
    storage, API and auth defaults) would be shadowed by the build settings above, so
    the runner's file is the app's with those appended.
    """
    with zipfile.ZipFile(app_jar) as jar:
        return jar.read("application.properties").decode()


class SchemaRegistry:
    """One Apicurio Registry on 127.0.0.1, its Confluent API at :attr:`url`.

    ``workdir`` holds the H2 database and ``registry.log``; a temporary directory is
    created (and removed by ``stop()``) when omitted. ``owner_pid``: as for the
    Kafka broker, the process whose death takes the registry down (this one when None).
    """

    def __init__(self, workdir: Path | None = None, *, port: int | None = None,
                 heap: str = HEAP, owner_pid: int | None = None) -> None:
        self._own_workdir = workdir is None
        self.workdir = Path(tempfile.mkdtemp(prefix="sharedstream-registry-")) \
            if workdir is None else workdir
        self.port = port or free_port()
        self.heap = heap
        self.process = ManagedProcess(
            "schema-registry", self.workdir / "registry.log",
            owner_pid=os.getpid() if owner_pid is None else (owner_pid or None),
            stop_signal=signal.SIGTERM, stop_timeout=20.0)
        self.start_seconds: float | None = None

    @property
    def url(self) -> str:
        """The Confluent-compatible API's base URL (``SchemaRegistryClient``'s ``url``)."""
        return f"http://127.0.0.1:{self.port}{CCOMPAT_PATH}"

    @property
    def log_path(self) -> Path:
        return self.process.log_path

    def _argv(self) -> list[str]:
        # DB_CLOSE_ON_EXIT=FALSE: Quarkus closes the pool itself on SIGTERM, and H2's
        # own shutdown hook racing it would log a spurious error at every stop.
        database = f"jdbc:h2:file:{self.workdir / 'registry'};DB_CLOSE_ON_EXIT=FALSE"
        return [find_java(), f"-Xmx{self.heap}", "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true",
                f"-Dquarkus.http.port={self.port}", "-Dquarkus.http.host=127.0.0.1",
                f"-Dquarkus.datasource.jdbc.url={database}",
                "-jar", str(registry_runner())]

    def answers(self) -> bool:
        """True when the Confluent API lists subjects (storage and REST layer both up)."""
        try:
            with urllib.request.urlopen(self.url + "/subjects", timeout=2.0) as response:
                return bool(response.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def start(self, timeout: float = 90.0) -> None:
        """Build the runner (first time only), launch, and wait until the API answers."""
        began = time.monotonic()
        argv = self._argv()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.process.spawn(argv)
        wait_until(self.answers, timeout=timeout, what=f"schema registry at {self.url}",
                   alive=self.process.running, log_path=self.log_path)
        self.start_seconds = time.monotonic() - began

    def stop(self) -> None:
        """Stop the registry (SIGTERM, SIGKILL after 20 s); its data go with an own workdir."""
        self.process.stop()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def restart(self, timeout: float = 90.0) -> None:
        """Stop and start again on the same port with the same schemas."""
        self.process.stop()
        self.start(timeout=timeout)

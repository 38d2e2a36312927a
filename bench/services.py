"""What every bench part shares: its services, the machine it ran on, and its log.

Services: ``KAFKA_BOOTSTRAP_SERVERS`` / ``SHAREDSTREAM_TEST_DATABASE_URL`` when set (each
PostgreSQL figure gets a fresh database created there), else a broker and a server
started with ``scripts/localservices`` for the run.
"""

from __future__ import annotations

import contextlib
import os
import platform
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import sqlalchemy as sa

import sharedstream

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results"

sys.path.insert(0, str(ROOT / "scripts"))
from localservices import KafkaBroker, PostgresServer  # type: ignore[import-not-found]  # noqa: E402


class Services:
    """The broker and PostgreSQL of the run: from the environment, or started here."""

    def __init__(self, stack: contextlib.ExitStack) -> None:
        bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
        if not bootstrap:
            broker = KafkaBroker()
            broker.start()
            stack.callback(broker.stop)
            bootstrap = broker.bootstrap
        self.bootstrap: str = bootstrap
        self._pg_url = os.environ.get("SHAREDSTREAM_TEST_DATABASE_URL")
        self._server: Any = None
        if not self._pg_url:
            self._server = PostgresServer()
            self._server.start()
            stack.callback(self._server.stop)

    def postgres(self) -> str:
        """A fresh, empty PostgreSQL database: every figure starts from the same state."""
        if self._server is not None:
            return str(self._server.create_database("bench"))
        assert self._pg_url is not None
        name = f"bench_{uuid.uuid4().hex[:12]}"
        admin = sa.create_engine(self._pg_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as connection:
            connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
        admin.dispose()
        return sa.make_url(self._pg_url).set(database=name).render_as_string(hide_password=False)


@contextlib.contextmanager
def sqlite_url() -> Iterator[str]:
    with tempfile.TemporaryDirectory() as tmp:
        yield f"sqlite:///{Path(tmp) / 'bench.db'}"


def machine() -> dict[str, Any]:
    cpu = next((line.split(":", 1)[1].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    mem_kb = int(Path("/proc/meminfo").read_text().split()[1])
    return {"nproc": os.cpu_count(), "cpu": cpu, "ram_gb": round(mem_kb / 2**20, 1),
            "python": platform.python_version(), "platform": platform.platform(),
            "librdkafka": confluent_kafka.libversion()[0],
            "load_average_at_start": os.getloadavg()}


def compile_measured(*trees: Path) -> None:
    """Write the bytecode of the measured code (sharedstream, bench/ and ``trees``, such as
    a baseline checkout's ``src``) before anything is timed.

    pip compiles a package when it installs it, so a user's process loads bytecode, as
    the plain confluent-kafka side does here. A checkout under PYTHONDONTWRITEBYTECODE
    (set on the machines these figures come from) would instead compile about a hundred
    modules in every timed process: ~60 ms of start-up that no installed process pays.
    """
    import compileall

    for tree in (Path(sharedstream.__file__).parent, Path(__file__).parent, *trees):
        compileall.compile_dir(tree, quiet=1)


def log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)

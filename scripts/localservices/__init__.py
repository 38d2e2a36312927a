"""Real Kafka, PostgreSQL and MariaDB servers for tests and benchmarks, without Docker.

Import it by path (it is not part of the installed package)::

    sys.path.insert(0, str(REPO / "scripts"))
    from localservices import KafkaBroker, PostgresServer, MariaDBServer

``tests/conftest.py`` and ``bench/`` do exactly that; ``scripts/kafka-local``,
``scripts/pg-local`` and ``scripts/mariadb-local`` are the command-line face.
"""

from ._process import ServiceError
from .kafka import KafkaBroker
from .mariadb import MariaDBServer
from .postgres import PostgresServer

__all__ = ["KafkaBroker", "MariaDBServer", "PostgresServer", "ServiceError"]

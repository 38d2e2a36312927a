"""Command line for the local services: ``scripts/{kafka,pg,mariadb}-local``.

    scripts/kafka-local start [--owner-pid PID]   start, print ``export ...`` lines
    scripts/kafka-local env                       print them again
    scripts/kafka-local status                    exit 0 when running and answering
    scripts/kafka-local stop                      stop and delete its data

A started service is described by a state file (``.services/<name>.json`` in
the repository, or ``--state``), which is how ``stop`` and ``status`` find it
from another process and how the tests take over the broker to restart it.
With ``--owner-pid`` the service dies with that process (``scripts/test``
passes its shell's PID); without it the service runs until ``stop``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
from pathlib import Path

from ._process import ServiceError, pid_alive
from .kafka import KafkaBroker
from .mariadb import MariaDBServer
from .postgres import PostgresServer

REPO = Path(__file__).resolve().parents[2]
SERVICES = ("kafka", "postgres", "mariadb")


def _env_lines(service: str, state_file: Path, state: dict[str, object]) -> list[str]:
    if service == "kafka":
        pairs = {"KAFKA_BOOTSTRAP_SERVERS": state["bootstrap"],
                 "SHAREDSTREAM_KAFKA_STATE": str(state_file)}
    elif service == "postgres":
        pairs = {"SHAREDSTREAM_TEST_DATABASE_URL": state["url"]}
    else:
        pairs = {"SHAREDSTREAM_TEST_MARIADB_URL": state["url"]}
    return [f"export {key}={shlex.quote(str(value))}" for key, value in pairs.items()]


def _start(service: str, state_file: Path, owner_pid: int) -> dict[str, object]:
    if state_file.exists():
        old = json.loads(state_file.read_text())
        if pid_alive(int(old["pid"])):
            raise ServiceError(f"{service} already running (pid {old['pid']}); "
                               f"stop it first or use another --state")
        state_file.unlink()
    workdir = Path(tempfile.mkdtemp(prefix=f"sharedstream-{service}-"))
    if service == "kafka":
        broker = KafkaBroker(workdir, owner_pid=owner_pid, cleanup=True, state_file=state_file)
        try:
            broker.start()
        except BaseException:
            broker.stop()
            raise
        print(f"kafka {broker.bootstrap} ready in {broker.start_seconds:.1f}s "
              f"(log {broker.log_path})", file=sys.stderr)
        state: dict[str, object] = json.loads(state_file.read_text())
        return state
    server: PostgresServer | MariaDBServer = (
        PostgresServer(workdir, owner_pid=owner_pid, cleanup=True) if service == "postgres"
        else MariaDBServer(workdir, owner_pid=owner_pid, cleanup=True))
    try:
        server.start()
        url = server.create_database()
    except BaseException:
        server.stop()
        raise
    print(f"{service} on 127.0.0.1:{server.port} ready in {server.start_seconds:.1f}s "
          f"(log {server.process.log_path})", file=sys.stderr)
    state = {"pid": server.process.pid, "port": server.port, "workdir": str(workdir),
             "url": url}
    state_file.parent.mkdir(parents=True, exist_ok=True)
    state_file.write_text(json.dumps(state, indent=2) + "\n")
    return state


def _stop(service: str, state_file: Path) -> None:
    if not state_file.exists():
        return
    if service == "kafka":
        KafkaBroker.from_state(state_file).stop()
        return
    state = json.loads(state_file.read_text())
    workdir, port = Path(state["workdir"]), int(state["port"])
    server: PostgresServer | MariaDBServer = (
        PostgresServer(workdir, port=port, owner_pid=0, cleanup=True) if service == "postgres"
        else MariaDBServer(workdir, port=port, owner_pid=0, cleanup=True))
    server.process.adopt(int(state["pid"]))
    server.stop()
    state_file.unlink(missing_ok=True)


def _answers(service: str, state_file: Path) -> bool:
    state = json.loads(state_file.read_text())
    if not pid_alive(int(state["pid"])):
        return False
    if service == "kafka":
        return KafkaBroker.from_state(state_file).answers()
    workdir, port = Path(state["workdir"]), int(state["port"])
    server = PostgresServer(workdir, port=port, owner_pid=0) if service == "postgres" \
        else MariaDBServer(workdir, port=port, owner_pid=0)
    return server.answers()


def main(service: str, argv: list[str]) -> int:
    if service not in SERVICES:
        raise ValueError(f"unknown service {service!r}")
    parser = argparse.ArgumentParser(prog=f"{service}-local",
                                     description=f"A local {service} for sharedstream's tests.")
    parser.add_argument("command", choices=["start", "stop", "status", "env"])
    parser.add_argument("--state", type=Path, default=REPO / ".services" / f"{service}.json",
                        help="state file describing the running service")
    parser.add_argument("--owner-pid", type=int, default=0,
                        help="stop the service when this process exits (default: never)")
    args = parser.parse_args(argv)
    state_file: Path = args.state.resolve()
    try:
        if args.command == "start":
            state = _start(service, state_file, args.owner_pid)
            print("\n".join(_env_lines(service, state_file, state)))
        elif args.command == "stop":
            _stop(service, state_file)
        elif args.command == "status":
            running = state_file.exists() and _answers(service, state_file)
            print(f"{service}: {'running' if running else 'not running'}")
            return 0 if running else 1
        else:
            if not state_file.exists():
                print(f"{service}: not running", file=sys.stderr)
                return 1
            state = json.loads(state_file.read_text())
            print("\n".join(_env_lines(service, state_file, state)))
    except ServiceError as error:
        print(f"{service}-local: {error}", file=sys.stderr)
        return 1
    return 0

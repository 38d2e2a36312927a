"""How long each read command takes as a whole process, on a database with 1,000,000 events.

What an operator waits for: ``sharedstream <command>`` from the shell prompt to its exit,
interpreter start, imports, configuration, the database round trips and the broker's
included. The database is PostgreSQL, seeded server-side (``generate_series``) with
``--events`` asset events over 100 assets and 200 watchers (one every half second: the
newest 2 hours hold 14,400), 10,000 recorded rejections, 10,000 audit entries, 10,000
task-state rows and 2,000 asset-state rows, 1,000 undelivered events; the broker holds
a 12-partition topic with a consumer group's committed offsets (``offsets show``) and a
dead-letter topic of 2,000 sharedstream records (``dlq inspect``).

Each command runs ``--runs`` times (default 3), alternating with the others; the best
wall time is reported (the machine is shared: the best run is the one least disturbed),
with the CPU seconds of that run (user + system, the child's own). A command that exits
non-zero fails the bench.

    python -m bench.command_latency [--events 1000000] [--runs 3] [--keep] [--out bench/results]
    python -m bench.command_latency --database-url URL --bootstrap HOST:PORT --dlq-topic T \
        --group G     # time again on a database seeded before (kept with --keep)

Services as every bench part (``bench/services.py``): ``SHAREDSTREAM_TEST_DATABASE_URL``
(a fresh database is created there) and ``KAFKA_BOOTSTRAP_SERVERS``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from bench import report
from bench.services import RESULTS, Services, compile_measured, log, machine
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

ASSETS = 100
WATCHERS = 200
PARTITIONS = 12
DEAD_LETTERS = 2_000
TARGET_S = 1.0


def seed_database(url: str, events: int) -> None:
    """The schema at head, then every table a read command reads, filled server-side."""
    from sharedstream.statestore.store import StateStore

    store = StateStore.from_url(url)
    store.upgrade()
    for n in range(ASSETS):
        store.register_asset(f"asset-{n:03d}", f"kafka://orders/{n}")
    store.close()
    engine = sa.create_engine(url)
    started = time.perf_counter()
    with engine.begin() as connection:
        run = connection.exec_driver_sql
        run("CREATE TEMPORARY TABLE ids AS SELECT row_number() OVER (ORDER BY id) - 1 AS n, "
            "id FROM asset")
        # One event every half second, the newest now; payloads as the README's orders.
        run("INSERT INTO asset_event (id, asset_id, watcher, payload, topic, topic_id, "
            '"partition", "offset", event_index, created_at) '
            f"SELECT g, ids.id, 'watcher-' || mod(g, {WATCHERS}), json_build_object("
            "'id', g, 'status', CASE WHEN mod(g, 10) = 0 THEN 'refunded' ELSE 'paid' END, "
            "'amount', mod(g, 1000), 'customer', 'c-' || mod(g, 5000)), 'orders', 'tid-orders', "
            f"mod(g, {PARTITIONS}), g / {PARTITIONS}, 0, "
            f"now() - ({events} - g) * interval '0.5 second' "
            f"FROM generate_series(1, {events}) g JOIN ids ON ids.n = mod(g, {ASSETS})")
        run(f"UPDATE event_sequence SET last_id = {events} WHERE id = 1")
        run("INSERT INTO rejected_message (watcher, topic, topic_id, \"partition\", "
            "\"offset\", reason, value_preview, created_at) "
            f"SELECT 'watcher-' || mod(g, {WATCHERS}), 'orders', 'tid-orders', "
            f"mod(g, {PARTITIONS}), g, 'missing amount', '{{\"id\": ' || g || '}}', "
            "now() - g * interval '1 minute' FROM generate_series(1, 10000) g")
        run("INSERT INTO audit_entry (at, actor, action, target, ok, result) "
            "SELECT now() - g * interval '1 minute', 'cli:ops', 'dlq replay', "
            "'orders.dlq', true, 'replayed 10 of 10 records' FROM generate_series(1, 10000) g")
        run("INSERT INTO task_state_store (dag_id, run_id, task_id, map_index, key, value, "
            "updated_at, expires_at) SELECT 'dag-' || mod(g, 50), 'run-' || g, 'load', -1, "
            "'job_id', '\"j-' || g || '\"', now(), now() + (mod(g, 3) - 1) * interval '1 day' "
            "FROM generate_series(1, 10000) g")
        run("INSERT INTO asset_state_store (asset_id, key, value, version, updated_at, "
            "writer_kind, writer_id) SELECT ids.id, 'last_seen/' || k, (k * 1000)::text, 1, "
            "now(), 'watcher', 'watcher-1' FROM ids, generate_series(0, 19) k")
        run("INSERT INTO delivery_cursor (destination, last_id, delivered, updated_at) "
            f"VALUES ('hooks', {events}, {events}, now())")
        run("INSERT INTO undelivered_event (destination, event_id, reason, attempts, "
            "created_at) SELECT 'hooks', g * 997, 'HTTP 400: unknown asset', 1, now() "
            f"FROM generate_series(1, 1000) g WHERE g * 997 <= {events}")
    with engine.connect() as connection:
        connection.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql(
            "VACUUM ANALYZE")
    engine.dispose()
    log(f"seeded {events:,} events and the rest in {time.perf_counter() - started:.0f} s")


def seed_broker(bootstrap: str) -> tuple[str, str]:
    """A topic with a consumer group's commits, and a dead-letter topic of
    :data:`DEAD_LETTERS` records with sharedstream's headers: (group, dead-letter topic)."""
    from sharedstream.core.message import Coordinates
    from sharedstream.kafka.dlq_headers import build_dlq_headers

    tag = uuid.uuid4().hex[:8]
    topic, dlq = f"cmd-orders-{tag}", f"cmd-orders-{tag}.dlq"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for name, partitions in ((topic, PARTITIONS), (dlq, 1)):
        admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for n in range(1_200):
        producer.produce(topic, json.dumps({"id": n}).encode(), partition=n % PARTITIONS)
    for n in range(DEAD_LETTERS):
        origin = Coordinates(topic, "tid-orders", n % PARTITIONS, n, int(time.time() * 1000))
        producer.produce(dlq, json.dumps({"id": n}).encode(), key=str(n).encode(),
                         headers=build_dlq_headers(
                             original_headers=[], origin=origin,
                             consumer_group=f"cmd.{topic}",
                             rejections={f"watcher-{n % 7}": "missing amount"},
                             replay_count=0))
    assert producer.flush(60) == 0
    group = f"cmd.{topic}"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, 60) for p in range(PARTITIONS)],
                        asynchronous=False)
    finally:
        consumer.close()
    return group, dlq


def drop_database(url: str) -> None:
    """Drop the seeded database (the server is shared)."""
    target = sa.make_url(url)
    admin = sa.create_engine(target.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.exec_driver_sql(f'DROP DATABASE "{target.database}" WITH (FORCE)')
    admin.dispose()


def delete_topics(bootstrap: str, topics: list[str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until the answers are in
    for future in admin.delete_topics(topics, operation_timeout=30).values():
        future.result(60)


def commands(group: str, dlq: str) -> list[tuple[str, list[str]]]:
    return [
        ("--help", ["--help"]),
        ("db current", ["db", "current"]),
        ("events list", ["events", "list"]),
        ("events list --asset", ["events", "list", "--asset", "asset-007"]),
        ("events list --watcher", ["events", "list", "--watcher", "watcher-7"]),
        ("events list --since 2h", ["events", "list", "--since", "2h"]),
        ("events tail", ["events", "tail"]),
        ("events undelivered", ["events", "undelivered"]),
        ("audit list", ["audit", "list"]),
        ("state-store stats", ["state-store", "stats"]),
        ("state-store list --asset", ["state-store", "list", "--asset", "asset-007"]),
        ("offsets show --group", ["offsets", "show", "--group", group]),
        ("dlq inspect --limit 50", ["dlq", "inspect", dlq, "--limit", "50"]),
        ("dlq inspect", ["dlq", "inspect", dlq]),
    ]


def sharedstream_command() -> list[str]:
    """What users run: the ``sharedstream`` script installed beside this interpreter (it
    imports the ``sharedstream`` of this environment, ``PYTHONPATH`` included; not a
    version manager's shim, which would add its own start-up), else the same entry point
    through this interpreter."""
    script = Path(sys.executable).parent / "sharedstream"
    return [str(script)] if script.exists() else [
        sys.executable, "-c", "from sharedstream.cli import main; main()"]


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run of ``argv`` to its exit; fails loudly on a
    non-zero exit."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, check=False)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[-4:])} exited {done.returncode}: "
                           f"{done.stderr.decode(errors='replace')[-500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def measure(url: str, bootstrap: str, group: str, dlq: str, runs: int) -> list[dict[str, Any]]:
    env = {**os.environ, "SHAREDSTREAM__DATABASE__URL": url,
           "SHAREDSTREAM_CONN_KAFKA_DEFAULT": json.dumps({"bootstrap.servers": bootstrap})}
    base = sharedstream_command()
    listed = commands(group, dlq)
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in listed}
    for _ in range(runs):  # alternating: a burst of load spreads over every command
        for name, argv in listed:
            samples[name].append(timed(base + argv, env))
    rows = []
    for name, _ in listed:
        wall, cpu = min(samples[name])
        rows.append({"command": name, "best_s": round(wall, 2), "cpu_s": round(cpu, 2),
                     "runs_s": [round(w, 2) for w, _ in samples[name]]})
        log(f"{name}: {wall:.2f} s (cpu {cpu:.2f} s)")
    return rows


def markdown(found: dict[str, Any]) -> str:
    m = found["machine"]
    lines = [f"Read commands as whole processes, best of {found['runs']}, on PostgreSQL with "
             f"{found['events']:,} events ({m['nproc']} cores, load "
             f"{m['load_average_at_start'][0]:.1f} at the start).", "",
             "| command | best (s) | CPU (s) | runs (s) | <= 1 s |", "|---|---:|---:|---|---|"]
    for row in found["commands"]:
        ok = "yes" if row["best_s"] <= TARGET_S else "NO"
        lines.append(f"| `{row['command']}` | {row['best_s']:.2f} | {row['cpu_s']:.2f} | "
                     f"{', '.join(f'{r:.2f}' for r in row['runs_s'])} | {ok} |")
    return "\n".join(lines) + "\n"


def run(services: Services, events: int, runs: int, *, keep: bool = False) -> dict[str, Any]:
    """Seed a fresh database and the broker, time every command, drop them (unless
    ``keep``: then the log says how to time them again with ``--database-url``)."""
    bootstrap, url = services.bootstrap, services.postgres()
    with contextlib.ExitStack() as stack:
        if not keep:
            stack.callback(drop_database, url)
        seed_database(url, events)
        group, dlq = seed_broker(bootstrap)
        if keep:
            log(f"kept: --database-url {url} --bootstrap {bootstrap} --group {group} "
                f"--dlq-topic {dlq}")
        else:
            stack.callback(delete_topics, bootstrap, [group.removeprefix("cmd."), dlq])
        return {"events": events, "runs": runs,
                "commands": measure(url, bootstrap, group, dlq, runs)}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.command_latency",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--name", default="commands", help="results file name")
    parser.add_argument("--keep", action="store_true",
                        help="keep the seeded database and topics; print how to reuse them")
    parser.add_argument("--database-url", help="a database seeded before: skip the seeding")
    parser.add_argument("--bootstrap")
    parser.add_argument("--group")
    parser.add_argument("--dlq-topic")
    args = parser.parse_args()
    compile_measured()
    found: dict[str, Any] = {"machine": machine()}
    if args.database_url:
        found.update(events=args.events, runs=args.runs, commands=measure(
            args.database_url, args.bootstrap, args.group, args.dlq_topic, args.runs))
    else:
        with contextlib.ExitStack() as stack:
            found.update(run(Services(stack), args.events, args.runs, keep=args.keep))
    report.write_part(args.out, args.name, found, markdown(found))


if __name__ == "__main__":
    main()

"""The bench runner: the full run, or one part of it, on the real broker and databases.

    python -m bench [--quick] [--out bench/results]     # everything: bench/full_run.py
    python -m bench --persistence [--quick]             # bench/persistence.py
    python -m bench --json-fanout [--quick]             # bench/json_fanout.py
    python -m bench --tracing [--quick]                 # bench/tracing_cost.py
    python -m bench --avro [--quick]                    # bench/avro_decode.py
    python -m bench --peers [--quick]                   # bench/peers.py
    python -m bench --commands [--quick]                # bench/command_latency.py
    python -m bench --watchers-scale [--quick]          # bench/watchers_scale.py
    python -m bench --startup [--quick]                 # bench/startup.py
    python -m bench --console-pages [--quick]           # bench/console_pages.py

Services: ``KAFKA_BOOTSTRAP_SERVERS`` / ``SHAREDSTREAM_TEST_DATABASE_URL`` when set, else
started for the run (``bench/services.py``). Each part writes ``<part>.json`` (every
figure, the machine, the sizes) and ``<part>.md`` (its tables) into ``--out``;
docs/performance.md says what each measures and how to read it. This module only
chooses; the parts measure.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench import (
    avro_decode,
    command_latency,
    console_pages,
    full_run,
    json_fanout,
    peers,
    persistence,
    report,
    startup,
    tracing_cost,
    watchers_scale,
)
from bench.services import RESULTS, Services, compile_measured, machine

# --part: (help, its run on the services, its tables). The run gets the services,
# whether --quick was given, and the parsed arguments.
Part = tuple[str, Callable[[Services, bool, argparse.Namespace], dict[str, Any]],
             Callable[[dict[str, Any]], str]]
PARTS: dict[str, Part] = {
    "persistence": (
        "persistence against hand-written references, on a PostgreSQL with fsync on",
        lambda s, quick, _: persistence.persistence(
            s, persistence.QUICK_PERSISTENCE if quick else persistence.PersistenceSizes()),
        persistence.persistence_markdown),
    "json_fanout": (
        "watchers parsing JSON against independent consumers, and whole processes timed "
        "from their start, under several fetch settings",
        lambda s, quick, _: sized(quick, full_run.run_json_fanout(s.bootstrap, sizes(quick))),
        json_fanout.markdown),
    "tracing": (
        "events/s with tracing off, on at sampling 1.0 and at 0.01, exporting to a real "
        "collector",
        lambda s, quick, _: sized(quick, full_run.run_tracing(s.bootstrap, sizes(quick))),
        tracing_cost.markdown),
    "avro": (
        "1/10/100 watchers sharing one Avro deserialiser against as many independent "
        "consumers",
        lambda s, quick, _: sized(quick, full_run.run_avro(s.bootstrap, sizes(quick))),
        avro_decode.markdown),
    "peers": (
        "quixstreams, sentry-arroyo and faust-streaming beside plain confluent-kafka and "
        "sharedstream, whole processes",
        lambda s, quick, args: sized(quick, full_run.run_peers(s.bootstrap, sizes(quick),
                                                               args.peer_python)),
        peers.markdown),
    "commands": (
        "each read command as a whole process on PostgreSQL with 1,000,000 events "
        "(--quick: 100,000)",
        lambda s, quick, _: command_latency.run(s, 100_000 if quick else 1_000_000,
                                                1 if quick else 3),
        command_latency.markdown),
    "watchers_scale": (
        "1 to 10,000 watchers each wanting its own key, with a match and with Python "
        "filters, against a hand-written router (not in the full run: minutes at 10,000)",
        lambda s, quick, _: watchers_scale.run(s.bootstrap, quick),
        watchers_scale.markdown),
    "startup": (
        "`sharedstream run` with one watcher and plain confluent-kafka, process start to "
        "first message (not in the full run)",
        lambda s, quick, _: startup.measure(s.bootstrap, 1 if quick else 5),
        startup.markdown),
    "console_pages": (
        "the console's watcher, held and asset lists (API and pages) at 10,000 watchers "
        "(--quick: 1,000), first page, middle page and search (not in the full run)",
        lambda s, quick, _: console_pages.measure(s.postgres(), 1_000 if quick else 10_000,
                                                  5 if quick else 20),
        console_pages.markdown),
}


def sizes(quick: bool) -> full_run.Sizes:
    return full_run.QUICK if quick else full_run.Sizes()


def sized(quick: bool, found: dict[str, Any]) -> dict[str, Any]:
    """A part's figures with the sizes they were measured at."""
    return {"sizes": asdict(sizes(quick)), **found}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts: a smoke run")
    parser.add_argument("--out", type=Path, default=RESULTS)
    for name, (text, _, _) in PARTS.items():
        parser.add_argument(f"--{name.replace('_', '-')}", action="store_true",
                            help=f"only this part: {text}")
    parser.add_argument("--peer-python", default=sys.executable,
                        help="the Python whose environment holds the peers (the "
                             "bench-peers extra); default: this one")
    args = parser.parse_args()
    compile_measured()
    from sharedstream.triggerer.gctune import tune_gc

    tune_gc()  # as `sharedstream run` does once start-up is over
    for name, (_, run, tables) in PARTS.items():
        if getattr(args, name):
            found: dict[str, Any] = {"machine": machine()}
            with contextlib.ExitStack() as stack:
                found.update(run(Services(stack), args.quick, args))
            report.write_part(args.out, name, found, tables(found))
            return
    full_run.run(sizes(args.quick), args.out, args.peer_python)


if __name__ == "__main__":
    main()

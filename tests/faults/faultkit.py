"""Checks the fault scenarios share: committed offsets, DLQ records, invariants sampled live.

Everything here reads only the broker, the database and the processes' logs,
never the triggerer's memory: a scenario's verdict is what a user would see.
The e2e suite's ``streams`` module already reads events and committed offsets;
this adds what faults need on top (each DLQ record's context, read by
the product's ``sharedstream.ops.dlq`` reader, a background
sampler of invariants, a log scan over every start of a process).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streams import committed, end_offsets
from triggerer import Triggerer, until

from sharedstream.ops.dlq import read_dead_letters

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results" / "faults.json"


@dataclass(frozen=True, slots=True)
class Size:
    """Which size the scenarios run at; ``pick(bounded, full)`` chooses."""

    full: bool
    soak_minutes: float

    @property
    def mode(self) -> str:
        return "full" if self.full else "bounded"

    def pick(self, bounded: int, full: int) -> int:
        return full if self.full else bounded


class Figures:
    """What each scenario measured, written once at the end of the session."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.scenarios: dict[str, dict[str, Any]] = {}

    def record(self, scenario: str, *, messages: int, faults: int, lost: int, duplicates: int,
               recover_seconds: float | None, **details: Any) -> None:
        self.scenarios[scenario] = {
            "messages": messages, "faults": faults, "lost": lost, "duplicates": duplicates,
            "recover_seconds": None if recover_seconds is None else round(recover_seconds, 1),
            **details}

    def write(self, path: Path = RESULTS) -> None:
        """Merge into the file: a run of one scenario keeps the others' latest figures."""
        existing: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
        section = existing.setdefault(self.mode, {})
        section.update(self.scenarios)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(existing, indent=2, sort_keys=True) + "\n")


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One DLQ record, by the headers the triggerer added."""

    identity: str
    partition: int
    offset: int
    watchers: frozenset[str]


def dead_letters(bootstrap: str, topic: str, timeout: float = 60.0) -> list[DeadLetter]:
    """Every record of the 1-partition DLQ ``topic`` (duplicates included), in order, read by
    the product's reader (``sharedstream.ops.dlq``); ``timeout`` bounds each wait for records."""
    found: list[DeadLetter] = []
    for record in read_dead_letters({"bootstrap.servers": bootstrap}, topic, timeout=timeout):
        assert record.identity is not None and record.origin is not None, record.problem
        found.append(DeadLetter(record.identity, record.origin.partition, record.origin.offset,
                                frozenset(record.watchers)))
    return found


def duplicates(items: Iterable[object]) -> int:
    """How many items are repeats of an earlier one."""
    return sum(n - 1 for n in Counter(items).values())


def wait_committed_end(bootstrap: str, group: str, topic: str, partitions: int,
                       timeout: float) -> float:
    """Wait until the group committed every partition's end; the seconds it took."""
    began = time.monotonic()
    ends = end_offsets(bootstrap, topic, partitions)
    until(lambda: committed(bootstrap, group, topic, partitions) == ends,
          f"committed offsets of {group} at the end of {topic} {ends}", timeout, interval=0.5)
    return time.monotonic() - began


def log_lines(process: Triggerer, needle: str) -> list[str]:
    """Lines containing ``needle`` in every log this process wrote (all of its starts)."""
    return [line for path in sorted(process.log_dir.glob("triggerer-*.log"))
            for line in path.read_text(errors="replace").splitlines() if needle in line]



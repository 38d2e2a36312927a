"""Counters for ``/metrics``: plain integers, bumped on the hot path, read at scrape.

Per group (:class:`GroupCounters`, on the event loop) and per broker adapter
(:class:`AdapterCounters`, the contract's typed counters).

Outcomes are counted once per message and watcher: a failure each time a delivery
round fails (so repeated failures show), an ack or a rejection when the message
is settled. The common case -- every watcher of the cohort acked -- costs one
integer addition (``clean``); per-watcher acks are ``clean`` plus the acks of the
messages that were not clean.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, fields
from typing import Any


@dataclass(slots=True)
class GroupCounters:
    received: int = 0
    redelivered: int = 0
    # Messages whose every watcher is done (terminal, or dead-lettering).
    settled: int = 0
    # Messages every watcher of the cohort acked in one round (a routed message, handed to
    # some watchers only, counts its acks per watcher instead).
    clean: int = 0
    # Messages a routed group handed to nobody: no match took them, and no watcher of the
    # group takes everything. Settled at once.
    unrouted: int = 0
    acked: Counter[str] = field(default_factory=Counter)
    failed: Counter[str] = field(default_factory=Counter)
    rejected: Counter[str] = field(default_factory=Counter)
    # Times each watcher's queue reached ``subscriber_queue_size`` and paused fetching: its
    # lag (core/flowcontrol.py), never counted as a failure.
    lagged: Counter[str] = field(default_factory=Counter)

    def outcomes(self, watcher: str) -> dict[str, int]:
        """``{"acked": n, "failed": n, "rejected": n}`` of one watcher."""
        return {"acked": self.clean + self.acked[watcher], "failed": self.failed[watcher],
                "rejected": self.rejected[watcher]}


def _counter(help_text: str) -> Any:
    """A counter field starting at 0; its help text is what ``/metrics`` says of it."""
    return field(default=0, metadata={"help": help_text})


@dataclass(slots=True)
class AdapterCounters:
    """A broker adapter's counters (the contract's :meth:`counters`).

    Each field is one Prometheus counter, ``sharedstream_<field>_total``: the field
    name is the only place the name is written, and the metric catalog
    (``triggerer/metrics.py``) builds its specs from these fields and their help.
    The adapter bumps them under its hand-off lock and hands out copies.
    """

    messages_consumed: int = _counter("Records read from the broker.")
    commits: int = _counter("Offset commits the broker acknowledged.")
    commit_failures: int = _counter(
        "Offset commits the broker refused or that failed (sent again later).")
    revoke_commit_failures: int = _counter(
        "Partitions revoked or closed before the broker confirmed the commit of what they "
        "resolved (their next owner hands that out again).")
    dead_letters: int = _counter("Dead-letter records the broker acknowledged.")
    dead_letter_failures: int = _counter(
        "Dead-letter sends that failed (retried with backoff).")
    rejections_recorded: int = _counter(
        "Rejections written to the database instead of a dead-letter topic.")
    topics_recreated: int = _counter(
        "Watched topics found deleted and recreated (read again from the start).")

    def items(self) -> list[tuple[str, int]]:
        """``(name, value)`` of every counter, in declaration order."""
        return [(f.name, getattr(self, f.name)) for f in fields(self)]


def counter_help() -> dict[str, str]:
    """Every adapter counter's name and help, in declaration order (the metric catalog)."""
    return {f.name: f.metadata["help"] for f in fields(AdapterCounters)}

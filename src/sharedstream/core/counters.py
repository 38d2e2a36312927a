"""Per-group counters for ``/metrics``: plain integers, bumped on the hot path, read at scrape.

Outcomes are counted once per message and watcher: a failure each time a delivery
round fails (so repeated failures show), an ack or a rejection when the message
is settled. The common case -- every watcher of the cohort acked -- costs one
integer addition (``clean``); per-watcher acks are ``clean`` plus the acks of the
messages that were not clean.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass(slots=True)
class GroupCounters:
    received: int = 0
    redelivered: int = 0
    # Messages whose every watcher is done (terminal, or dead-lettering).
    settled: int = 0
    clean: int = 0
    acked: Counter[str] = field(default_factory=Counter)
    failed: Counter[str] = field(default_factory=Counter)
    rejected: Counter[str] = field(default_factory=Counter)

    def outcomes(self, watcher: str) -> dict[str, int]:
        """``{"acked": n, "failed": n, "rejected": n}`` of one watcher."""
        return {"acked": self.clean + self.acked[watcher], "failed": self.failed[watcher],
                "rejected": self.rejected[watcher]}

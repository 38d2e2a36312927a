"""The commit driver: which offsets to commit, and what the broker made of them. No I/O.

The consumer thread owns it. Per owned partition it keeps the latest target the loop
published (generation, offset, terminal offsets above), the last one sent and the last
one the broker confirmed, and which partitions have a target not sent yet. The thread
asks it for the requests of a tick or of a synchronous commit, sends them, and reports
the answer back; the driver never touches a client, so it is unit-tested on its own
(tests/unit/kafka/test_commit_driver.py).

* The asynchronous tick sends each target once, answered or not: the answer (or a
  refusal, which marks it for sending again) comes through the commit callback.
* A synchronous commit (revocation, close) sends every target the broker has not
  confirmed: an asynchronous request still unanswered may yet be refused (a rebalance
  overtook it), and once the partitions are gone nothing would commit what they
  resolved (guarantee 7).
* The metadata budget halves each time the broker refuses metadata as too large;
  the terminal offsets above the commit are encoded within it (kafka/progress.py).
* A target of another generation than the partition's current one is never sent:
  the partition was revoked and assigned again (or its topic recreated) since.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from sharedstream.core.ledger import Key, Target
from sharedstream.kafka.progress import DEFAULT_MAX_CHARS, encode_progress

# What is committed for a partition: (offset, metadata).
Committed = tuple[int, str]


class CommitDriver:
    """Commit bookkeeping of the owned partitions (see module docstring).

    ``owned`` is the consumer thread's map of owned partitions to their generation,
    read here, never written.
    """

    def __init__(self, owned: Mapping[Key, int], max_chars: int = DEFAULT_MAX_CHARS) -> None:
        self._owned = owned
        self.metadata_max_chars = max_chars
        self._latest: dict[Key, Target] = {}
        self._sent: dict[Key, Committed] = {}
        self._confirmed: dict[Key, Committed] = {}
        self._unsent: set[Key] = set()

    def take(self, fresh: Mapping[Key, Target]) -> None:
        """Targets the loop published since the last tick."""
        if fresh:
            self._latest.update(fresh)
            self._unsent.update(fresh)

    def requests(self, *, synchronous: bool, only: frozenset[Key] | None = None
                 ) -> list[tuple[Key, Committed]]:
        """What to send now, each marked sent: for the tick, the targets not sent yet;
        for a synchronous commit, every target not confirmed (of ``only``, if given)."""
        keys = set(self._latest) if synchronous else self._unsent
        done = self._confirmed if synchronous else self._sent
        if only is not None:
            keys = keys & only
        out: list[tuple[Key, Committed]] = []
        for key in list(keys):
            self._unsent.discard(key)
            target = self.target(key)
            if target is None or done.get(key) == target:
                continue
            self._sent[key] = target
            out.append((key, target))
        return out

    def target(self, key: Key) -> Committed | None:
        """The latest target of an owned partition, as committed: (offset, metadata)."""
        latest = self._latest.get(key)
        if latest is None or self._owned.get(key) != latest[0]:
            return None
        _, offset, above = latest
        return offset, encode_progress(offset, above, self.metadata_max_chars)

    def confirmed(self, key: Key, committed: Committed) -> None:
        """The broker confirmed this commit of ``key``."""
        if key in self._owned:
            self._confirmed[key] = committed

    def refused(self, keys: Iterable[Key], *, metadata_too_large: bool = False) -> None:
        """These commits failed: send them again (with half the metadata, if the broker
        found it too long). Partitions gone meanwhile are not sent again."""
        if metadata_too_large:
            self.metadata_max_chars //= 2
        for key in keys:
            if key in self._owned:
                self._sent.pop(key, None)
                self._unsent.add(key)

    def unconfirmed(self, keys: Iterable[Key]) -> list[Key]:
        """Of ``keys``, those whose latest target the broker has not confirmed, sorted."""
        return sorted(key for key in keys
                      if (target := self.target(key)) is not None
                      and self._confirmed.get(key) != target)

    def forget(self, key: Key) -> None:
        """A partition went or starts again: nothing of its old commits counts."""
        self._latest.pop(key, None)
        self._sent.pop(key, None)
        self._confirmed.pop(key, None)
        self._unsent.discard(key)

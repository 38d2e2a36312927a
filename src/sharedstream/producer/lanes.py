"""Per-partition lane state: which offsets are handed out, held, delivering or terminal.

A lane is one partition of one assignment generation. It answers one question
for the commit loop: how far may the committed offset move, and which terminal
offsets above it must be remembered (guarantee 7)?

States of an offset the consumer read:

* ``PENDING``: handed to the manager, outcome unknown.
* ``HELD``: some watcher failed it; it is the lane's floor until it turns
  terminal, and it is redelivered after the manager's ``retry_after``.
* ``DELIVERING``: clean but rejected by someone; terminal once its dead-letter
  record is acknowledged (or recorded in ``rejected_message``).
* ``TERMINAL``: acked by all, or rejected and delivered. Terminal entries at the
  head of the lane are dropped as the commit target passes them.

The commit target is the first non-terminal offset (everything before it is
terminal) or, when nothing is outstanding, one past the last terminal offset.
Offsets are not assumed contiguous (compaction and transaction markers leave
gaps): entries are kept in read order and the target follows them.

Owned by the event loop: the consumer thread never touches a lane. It hands
records over, and applies the pauses, seeks and commit targets the loop
publishes (see ``KafkaSharedStreamProducer``).
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from dataclasses import dataclass, field


class Fetch(enum.Enum):
    """Whether a lane takes what the consumer reads.

    * ``OPEN``: every record read is admitted.
    * ``BOUNDED``: the lane reached its bound; its partition is (being) paused and
      records read past ``resume_at`` are discarded (they are read again later).
    * ``REWINDING``: the bound lifted; the consumer is asked to seek back to
      ``resume_at`` and resume. Records still queued from before the seek are
      discarded until the consumer says the seek happened.
    """

    OPEN = "open"
    BOUNDED = "bounded"
    REWINDING = "rewinding"


class State(enum.Enum):
    PENDING = "pending"
    HELD = "held"
    DELIVERING = "delivering"
    TERMINAL = "terminal"


class Entry:
    """One offset the consumer read (one per consumed record: a plain slots class).

    ``rejections`` stays None until some watcher rejects the message.
    """

    __slots__ = ("attempts", "offset", "rejections", "size", "state")

    def __init__(self, offset: int, state: State) -> None:
        self.offset = offset
        self.state = state
        self.rejections: dict[str, str] | None = None
        self.attempts = 0
        self.size = 0  # key + value bytes, counted in ``open_bytes`` until terminal


@dataclass(slots=True)
class Lane:
    """One assigned partition.

    ``base`` is the committed position the lane started from (None until known:
    a new group starts wherever ``auto.offset.reset`` puts it, learnt from the
    first message read). ``remembered`` holds terminal offsets decoded from the
    commit metadata that have not been read yet in this generation.
    """

    topic: str
    partition: int
    generation: int
    base: int | None = None
    remembered: set[int] = field(default_factory=set)
    entries: OrderedDict[int, Entry] = field(default_factory=OrderedDict)
    # How many of ``entries`` are terminal: lets ``commit_target`` skip scanning the
    # lane for terminal offsets above the target when there are none (the usual case).
    terminal: int = 0
    # A record below ``base`` was read and skipped (logged once per lane).
    below_base_reported: bool = False
    fetch: Fetch = Fetch.OPEN
    # BOUNDED / REWINDING: the first offset not admitted, where reading resumes.
    resume_at: int = 0
    # How many of ``entries`` are HELD (kept by hold/release: health reads it per scrape).
    held_count: int = 0
    # Key + value bytes of the entries not yet terminal (held in memory for watchers).
    open_bytes: int = 0

    def admit(self, offset: int) -> Entry | None:
        """Record a freshly read offset; the new entry when it must be handed out.

        None for a remembered terminal offset (guarantee 7), for an offset below
        the committed position, and for a copy of one already read in this
        generation (a librdkafka re-fetch after pause/resume). Skipped messages
        cost the caller no decoding.
        """
        if self.base is None:
            self.base = offset
        if offset < self.base or offset in self.entries:
            return None
        if offset in self.remembered:
            self.remembered.discard(offset)
            self.entries[offset] = Entry(offset, State.TERMINAL)
            self.terminal += 1
            return None
        entry = Entry(offset, State.PENDING)
        self.entries[offset] = entry
        return entry

    def weigh(self, entry: Entry, size: int) -> None:
        """Count a handed-out entry's bytes until it turns terminal."""
        entry.size = size
        self.open_bytes += size

    def get(self, offset: int) -> Entry | None:
        return self.entries.get(offset)

    def finish(self, entry: Entry) -> None:
        """Mark an entry terminal and release its rejections."""
        if entry.state is State.HELD:
            self.held_count -= 1
        if entry.state is not State.TERMINAL:
            self.terminal += 1
            self.open_bytes -= entry.size
        entry.state = State.TERMINAL
        entry.rejections = None

    def commit_target(self) -> tuple[int, list[int]] | None:
        """``(offset to commit, terminal offsets above it)`` or None before anything is known.

        Drops terminal entries the target passes: once committed they need no memory.
        """
        if self.base is None:
            return None
        self.trim()
        entries = self.entries
        target = self.base
        above: list[int] = []
        if self.terminal:
            above = [o for o, e in entries.items() if e.state is State.TERMINAL]
        if self.remembered:
            self.remembered = {o for o in self.remembered if o >= target}
            above.extend(self.remembered)
        return target, above

    def trim(self) -> None:
        """Drop the terminal prefix: ``base`` becomes the floor (first unresolved offset),
        or one past the last terminal offset when nothing is outstanding."""
        if self.base is None:
            return
        entries = self.entries
        passed = 0
        while entries:
            offset, entry = entries.popitem(last=False)
            if entry.state is not State.TERMINAL:
                entries[offset] = entry
                entries.move_to_end(offset, last=False)
                break
            passed += 1
            self.base = offset + 1
        if passed:
            self.terminal -= passed
        if entries:
            self.base = next(iter(entries))

    def hold(self, entry: Entry) -> None:
        """A watcher failed the entry: it is the floor until redelivered and resolved."""
        entry.state = State.HELD
        self.held_count += 1

    def release(self, entry: Entry) -> None:
        """A held entry is handed out again."""
        entry.state = State.PENDING
        self.held_count -= 1

    def held(self) -> int:
        return self.held_count

    @property
    def at_bound(self) -> bool:
        """Paused for its bound, or not yet read again from where it stopped."""
        return self.fetch is not Fetch.OPEN

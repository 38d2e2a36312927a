"""A group's one flow-control decision: when it stops fetching, why, and when it resumes.

The bounds it decides on (``[triggerer]``; the table in docs/configuration.md lists them
with the adapter's own bounds, which only apply this decision):

* ``max_in_flight``: the group's messages handed out and not resolved yet, plus those
  held for a watcher that failed one or is absent;
* ``subscriber_queue_size``: messages queued for one watcher, not yet taken by its
  filter. A watcher whose queue reaches it while its filter is busy is *lagging*. One
  whose filter waits for messages (it took all it had) is not, however large the batch
  just handed to it: it takes that batch at its next step.

Invariants:

1. Only :class:`FlowControl` says whether the group fetches; the group applies what it
   says (the adapter's ``pause()`` / ``resume()``) and nothing else pauses a group.
2. A lagging watcher is lag, never a failure: its queue reaching the bound pauses
   fetching for the whole group, is counted (``lagged``, per watcher) and named while it
   lasts (:attr:`FlowControl.lagging`); it is never failed, held or handed a message
   again for it. Siblings run ahead of it by at most its queue. Only an exception, an
   ``ack_timeout`` or a watcher's absence fails a watcher for a message.
3. Paused (for either bound), the group resumes once in flight is down to half
   ``max_in_flight`` *and* every lagging watcher's queue drained to half its bound: the
   halves keep it from pausing again on the next batch.
4. Bounds are soft: a batch is handed out whole, then checked, and what the adapter had
   read before the pause reached it (at most its hand-off backlog: eight batches for
   Kafka) is still handed out. So a watcher's queue, and how far its siblings run ahead
   of it, can exceed ``subscriber_queue_size`` by that much, never more.
5. Cost: the check of a batch looks at the watchers handed something (O(matched
   watchers)), a resume check at the lagging ones; nothing per message. The check runs
   before those watchers are woken, so it sees which of them were waiting.

Failure window: none of its own. What a pause holds back stays on the broker; the
decision's state lives in the process and starts empty with a new group.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable
from typing import Protocol


class Pause(enum.Enum):
    """Why a group stopped fetching (``/status``)."""

    IN_FLIGHT = "in_flight"  # max_in_flight messages handed out or held
    LAG = "lag"  # a watcher's queue reached subscriber_queue_size


class Queue(Protocol):
    """A watcher's queue as the decision sees it (a stream)."""

    @property
    def name(self) -> str: ...

    @property
    def queued(self) -> int: ...

    @property
    def parked(self) -> bool:
        """Its filter waits for messages (it took everything it had)."""


class FlowControl:
    """The decision (see the module docstring); it does no I/O, the group applies it."""

    __slots__ = ("_lagging", "lagged", "low_queue", "max_in_flight", "queue_bound",
                 "resume_in_flight")

    def __init__(self, max_in_flight: int, queue_bound: int, lagged: Counter[str]) -> None:
        self.max_in_flight = max_in_flight
        self.resume_in_flight = max_in_flight // 2
        self.queue_bound = queue_bound
        # A paused group may resume once a lagging queue is down to this length.
        self.low_queue = queue_bound // 2
        self.lagged = lagged  # the group's counter: times each watcher's queue filled
        self._lagging: dict[str, Queue] = {}

    def handed(self, in_flight: int, queues: Iterable[Queue]) -> Pause | None:
        """A batch was handed to ``queues`` (not woken yet): why the group must stop
        fetching now (None: it may go on). Notes each busy watcher whose queue reached its
        bound as lagging."""
        bound, lagging = self.queue_bound, self._lagging
        for queue in queues:
            if queue.queued >= bound and not queue.parked:
                name = queue.name
                if name not in lagging:
                    lagging[name] = queue
                    self.lagged[name] += 1
        if in_flight >= self.max_in_flight:
            return Pause.IN_FLIGHT
        return Pause.LAG if lagging else None

    def may_resume(self, in_flight: int) -> bool:
        """Whether a paused group may fetch again; forgets the lagging watchers whose
        queues drained to the low mark."""
        if in_flight > self.resume_in_flight:
            return False
        lagging = self._lagging
        if lagging:
            low = self.low_queue
            for name in [name for name, queue in lagging.items() if queue.queued <= low]:
                del lagging[name]
        return not lagging

    def left(self, name: str) -> None:
        """The watcher left the group: its queue no longer holds the flow back."""
        self._lagging.pop(name, None)

    @property
    def lagging(self) -> dict[str, int]:
        """The watchers whose full queues hold the flow back now, with their queues."""
        return {name: queue.queued for name, queue in self._lagging.items()}

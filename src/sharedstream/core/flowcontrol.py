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

1. Only :class:`FlowControl` says whether the group fetches, and keeps the group's flow
   (:class:`~sharedstream.core.groupstate.Flow`, the reason of a pause, what is in
   flight); the group applies what it says through the one callback it is built with
   (the adapter's ``pause()`` / ``resume()``), and nothing else pauses a group.
2. A lagging watcher is lag, never a failure: its queue reaching the bound pauses
   fetching for the whole group, is counted (``lagged``, per watcher) and named while it
   lasts (:attr:`FlowControl.lagging`); it is never failed, held or handed a message
   again for it. Siblings run ahead of it by at most its queue. Only an exception, an
   ``ack_timeout`` or a watcher's absence fails a watcher for a message.
3. Paused (for either bound), the group resumes once in flight is down to half
   ``max_in_flight`` *and* every lagging watcher's queue drained to half its bound: the
   halves keep it from pausing again on the next batch.
4. Bounds are soft: a batch is handed out whole, then checked, and what the adapter had
   read before the pause reached it (at most its hand-off backlog: ``max_in_flight``
   messages or ``max_in_flight_bytes`` for Kafka, plus the one batch being read) is
   still handed out. So a watcher's
   queue, and how far its siblings run ahead of it, can exceed ``subscriber_queue_size``
   by that much, never more.
5. Cost: the check of a batch looks at the watchers handed something (O(matched
   watchers)), a resume check at the lagging ones; nothing per message. The check runs
   before those watchers are woken, so it sees which of them were waiting.

It is one of the group's parts (:mod:`sharedstream.core.group`): the fan-out counts what
it hands out into :attr:`FlowControl.in_flight` and reports each batch
(:meth:`FlowControl.handed`), the resolution counts what settles out of it and asks
:meth:`FlowControl.maybe_resume` where in flight crosses the resume mark, a stream asks
it where its queue crosses the low mark.

Failure window: none of its own. What a pause holds back stays on the broker; the
decision's state lives in the process and starts empty with a new group.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Protocol

from sharedstream.core.groupstate import FLOW_MOVES, FLOWING, PAUSED, QUIESCED, Flow
from sharedstream.core.lifecycle import check_move


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
    """The decision and the group's flow (see the module docstring); ``apply(fetch)`` is
    the group's: it pauses (False) or resumes (True) the adapter."""

    __slots__ = ("_apply", "_ended", "_label", "_lagging", "flow", "in_flight", "lagged",
                 "low_queue", "max_in_flight", "pause_reason", "queue_bound",
                 "resume_in_flight")

    def __init__(self, max_in_flight: int, queue_bound: int, lagged: Counter[str],
                 apply: Callable[[bool], None], label: str = "flow") -> None:
        self.max_in_flight = max_in_flight
        self.resume_in_flight = max_in_flight // 2
        self.queue_bound = queue_bound
        # A paused group may resume once a lagging queue is down to this length.
        self.low_queue = queue_bound // 2
        self.lagged = lagged  # the group's counter: times each watcher's queue filled
        self._lagging: dict[str, Queue] = {}
        self._apply = apply
        self._label = label
        self._ended = False
        self.flow = FLOWING
        self.pause_reason: Pause | None = None  # why the group is PAUSED
        # Entries handed out and not resolved, or held: the fan-out adds, the
        # resolution and the group's partition ends subtract.
        self.in_flight = 0

    def _move(self, flow: Flow) -> None:
        self.flow = check_move(self._label, FLOW_MOVES, self.flow, flow)

    def handed(self, queues: Iterable[Queue]) -> None:
        """A batch was handed to ``queues`` (not woken yet): stop fetching if a bound is
        reached. Notes each busy watcher whose queue reached its bound as lagging."""
        bound, lagging = self.queue_bound, self._lagging
        for queue in queues:
            if queue.queued >= bound and not queue.parked:
                name = queue.name
                if name not in lagging:
                    lagging[name] = queue
                    self.lagged[name] += 1
        if self.flow is not FLOWING:
            return
        if self.in_flight >= self.max_in_flight:
            self.pause_reason = Pause.IN_FLIGHT
        elif lagging:
            self.pause_reason = Pause.LAG
        else:
            return
        self._move(PAUSED)
        self._apply(False)

    def maybe_resume(self) -> None:
        """Resume a paused group when in flight is down to half its bound and every
        lagging watcher's queue to half its own (forgetting those that drained)."""
        if self.flow is not PAUSED or self._ended or self.in_flight > self.resume_in_flight:
            return
        lagging = self._lagging
        if lagging:
            low = self.low_queue
            for name in [name for name, queue in lagging.items() if queue.queued <= low]:
                del lagging[name]
            if lagging:
                return
        self.pause_reason = None
        self._move(FLOWING)
        self._apply(True)

    def quiesce(self) -> None:
        """Fetch nothing new from now on (shutdown); what is in flight still resolves.
        Idempotent."""
        flow = self.flow
        if flow is QUIESCED:
            return
        self._move(QUIESCED)
        self.pause_reason = None
        if flow is FLOWING:
            self._apply(False)

    def ended(self) -> None:
        """The group stopped or failed: it never fetches again, whatever settles."""
        self._ended = True

    def left(self, name: str) -> None:
        """The watcher left the group: its queue no longer holds the flow back."""
        self._lagging.pop(name, None)

    @property
    def lagging(self) -> dict[str, int]:
        """The watchers whose full queues hold the flow back now, with their queues."""
        return {name: queue.queued for name, queue in self._lagging.items()}

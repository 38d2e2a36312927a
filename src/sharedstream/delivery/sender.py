"""What the deliverer needs of a destination kind.

``send`` delivers events in order and answers for a prefix of them: ``None`` for each
the destination took, a :class:`~sharedstream.delivery.errors.PermanentDeliveryError`
for each it refused for good, and at most one
:class:`~sharedstream.delivery.errors.TransientDeliveryError`, last: the events after
it were not tried. ``maybe_sent`` says the events may have reached the destination
before (a crash, a takeover, an answer lost to a timeout): a kind that can find out
(Airflow) checks before sending again; the others rely on the identity they carry.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from sharedstream.delivery.errors import DeliveryError
from sharedstream.statestore.events import EventRecord

Results = list[DeliveryError | None]


class Sender(Protocol):
    async def send(self, events: Sequence[EventRecord], *, maybe_sent: bool) -> Results: ...

    async def aclose(self) -> None: ...

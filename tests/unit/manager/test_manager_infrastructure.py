"""An InfrastructureError from a filter holds the message forever: never dead-lettered."""

from __future__ import annotations

from typing import Any

from manager_fakes import Harness, settle

from sharedstream.core.ledger import State
from sharedstream.core.streamconfig import InfrastructureError


async def test_infrastructure_errors_never_count_towards_max_attempts() -> None:
    outage = {"on": True}

    async def downstream(message: str) -> list[Any]:
        if outage["on"]:
            raise InfrastructureError("target down")
        return []

    h = Harness(["a"], max_attempts=2, retry_backoff_initial=1.0, retry_backoff_max=4.0)
    h.start("a", downstream)
    await settle()
    h.producer.feed(("p", 0))
    await settle()
    for _attempt in range(5):  # well past max_attempts
        outcome = h.outcome(("p", 0))
        assert outcome.failed == {"a"} and not outcome.rejected
        h.clock.advance(10.0)  # past the backoff: handed out again, and fails again
        await settle()
    assert h.triggers["a"].seen == ["p:0"] * 6
    outage["on"] = False
    h.clock.advance(10.0)
    await settle()
    final = h.outcome(("p", 0))
    assert final.acked == {"a"} and final.state is State.TERMINAL
    await h.stop()

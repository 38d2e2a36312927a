"""A token bucket per Airflow instance: the bridge's requests never exceed a set rate.

Why: after an outage the sink replays a backlog from Kafka as fast as it can; an
Airflow API server (often one small process) should see a steady trickle, not a
burst of thousands of POSTs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


class TokenBucket:
    """``rate`` requests per second on average, up to ``burst`` at once; rate 0 = unlimited.

    ``clock`` and ``sleep`` are the time source and the wait (injectable for tests).
    """

    def __init__(self, rate: float, burst: int,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(burst)
        self._stamp = clock()
        self._lock = asyncio.Lock()

    async def acquire(self) -> None:
        """Wait until one request may go (callers queue in order)."""
        if self.rate <= 0:
            return
        async with self._lock:
            while True:
                now = self._clock()
                self._tokens = min(float(self.burst),
                                   self._tokens + (now - self._stamp) * self.rate)
                self._stamp = now
                if self._tokens >= 1.0:
                    self._tokens -= 1.0
                    return
                await self._sleep((1.0 - self._tokens) / self.rate)

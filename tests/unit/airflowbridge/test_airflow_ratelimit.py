"""The per-instance token bucket, on a fake clock: nothing here really sleeps.

Rates and times are powers of two, so the bucket's float arithmetic is exact and a
wait ends with exactly one token (a fake clock, unlike a real one, does not move on
by itself after a wait that fell short by a rounding error).
"""

from __future__ import annotations

import asyncio

from sharedstream.airflowbridge.ratelimit import TokenBucket


class FakeTime:
    """A clock that only moves when the bucket sleeps (or a test advances it)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)  # let other callers run, as a real wait would


def bucket(rate: float, burst: int, time: FakeTime) -> TokenBucket:
    return TokenBucket(rate, burst, clock=time.clock, sleep=time.sleep)


async def test_a_burst_goes_at_once_then_one_request_per_interval() -> None:
    time = FakeTime()
    limiter = bucket(rate=4, burst=3, time=time)
    for _ in range(3):
        await limiter.acquire()
    assert time.sleeps == []
    for _ in range(2):
        await limiter.acquire()
    assert time.sleeps == [0.25, 0.25]
    assert time.now == 1000.5


async def test_idle_time_refills_up_to_the_burst_only() -> None:
    time = FakeTime()
    limiter = bucket(rate=2, burst=2, time=time)
    await limiter.acquire()
    await limiter.acquire()
    time.now += 3600  # an hour idle earns 7200 tokens, but the bucket holds 2
    for _ in range(3):
        await limiter.acquire()
    assert time.sleeps == [0.5]


async def test_a_partly_refilled_bucket_waits_only_for_the_rest() -> None:
    time = FakeTime()
    limiter = bucket(rate=8, burst=1, time=time)
    await limiter.acquire()
    time.now += 0.0625  # half a token earned
    await limiter.acquire()
    assert time.sleeps == [0.0625]


async def test_the_sustained_rate_is_kept_under_concurrency() -> None:
    time = FakeTime()
    limiter = bucket(rate=4, burst=2, time=time)
    order: list[int] = []

    async def request(n: int) -> None:
        await limiter.acquire()
        order.append(n)

    await asyncio.gather(*(request(n) for n in range(12)))
    assert order == list(range(12))  # callers go in the order they asked
    assert time.sleeps == [0.25] * 10  # 2 at once, then 10 at 4 per second


async def test_rate_zero_is_unlimited() -> None:
    time = FakeTime()
    limiter = bucket(rate=0, burst=1, time=time)
    for _ in range(1000):
        await limiter.acquire()
    assert time.sleeps == []

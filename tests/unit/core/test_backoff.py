"""Retry delays double up to their cap, and each is spread between half and all of it;
a failure that says when to try again only shortens the wait."""

from __future__ import annotations

import random

from sharedstream.core.backoff import Backoff, exponential, jittered, retry_delay


def test_exponential_doubles_up_to_the_cap() -> None:
    assert [exponential(n, 0.5, 5.0) for n in (1, 2, 3, 4, 5, 100)] == [
        0.5, 1.0, 2.0, 4.0, 5.0, 5.0]


def test_jitter_spreads_between_half_and_all_of_the_delay() -> None:
    rng = random.Random(7)
    delays = [jittered(4.0, rng) for _ in range(2000)]
    assert 2.0 <= min(delays) < 2.1 and 3.9 < max(delays) <= 4.0
    assert len({round(d, 3) for d in delays}) > 1000  # not one value: processes spread out


def test_backoff_grows_and_resets() -> None:
    backoff = Backoff(1.0, 8.0, random.Random(1))
    first, second, third = backoff.next(), backoff.next(), backoff.next()
    assert 0.5 <= first <= 1.0 and 1.0 <= second <= 2.0 and 2.0 <= third <= 4.0
    backoff.reset()
    assert 0.5 <= backoff.next() <= 1.0


def test_a_retry_hint_only_shortens_the_wait_and_never_goes_below_now() -> None:
    assert retry_delay(8.0, 1.5) == 1.5  # sooner than even half the backoff: the hint
    assert 4.0 <= retry_delay(8.0, 100.0) <= 8.0  # later than the backoff: the backoff
    assert 4.0 <= retry_delay(8.0) <= 8.0  # no hint: the backoff
    assert retry_delay(8.0, -3.0) == 0.0  # a moment already past: now

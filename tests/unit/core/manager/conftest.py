"""The manager's unit tests run on a manual clock and assert exact times: retries wait
their full nominal delay here (the upper end of the jitter, which
tests/unit/core/test_backoff.py checks on its own)."""

from __future__ import annotations

import random

import pytest

from sharedstream.core import backoff


class UpperEnd(random.Random):
    def uniform(self, a: float, b: float) -> float:
        return b


@pytest.fixture(autouse=True)
def full_delays(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backoff, "_RNG", UpperEnd())

"""What the state-store integration tests import: a clock they move by hand and the type of
the ``make_store`` fixture. Here, not in this directory's conftest: every conftest is the
module ``conftest``, and when several test directories are named in one run another
directory's may be the one a ``from conftest import`` finds."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sharedstream.statestore import StateStore


@dataclass
class FakeClock:
    now: datetime

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> None:
        self.now += delta


MakeStore = Callable[..., StateStore]

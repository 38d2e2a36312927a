"""Test your watchers without Kafka: ``from sharedstream.testing import WatcherHarness``.

See :mod:`sharedstream.testing.harness` and the manual's "Testing watchers" page.
"""

from __future__ import annotations

from sharedstream.testing.harness import (
    Delivery,
    Event,
    InjectedFailure,
    Rejection,
    WatcherHarness,
)

__all__ = ["Delivery", "Event", "InjectedFailure", "Rejection", "WatcherHarness"]

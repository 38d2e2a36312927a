"""What the unit-of-work sink reads of ``[process]``, and its defaults.

The triggerer's :class:`~sharedstream.triggerer.config.ProcessSettings` satisfies
:class:`BatchSettings` and takes its defaults from here, so the sink needs no import of
the process's configuration.
"""

from __future__ import annotations

from typing import Protocol

# Per-message windows up to the writer's cap of 2,048 events per transaction: with
# 500, a saturated writer committed 4x as often (issue 28, round six).
BATCH_SIZE = 2048
MAX_DELAY = 0.0  # seconds: never wait for a fuller batch


class BatchSettings(Protocol):
    """``uow_batch_size``: windows per transaction at most; ``uow_max_delay``: how long
    the oldest queued window may wait for a fuller batch."""

    @property
    def uow_batch_size(self) -> int: ...

    @property
    def uow_max_delay(self) -> float: ...

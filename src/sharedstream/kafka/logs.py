"""librdkafka's own log lines, through Python logging and without the flood.

Every client sharedstream builds passes this logger as librdkafka's ``logger``, so its
lines land in the process's logging (its format, its level, ``--log-level``) instead of
raw ``%3|...|FAIL|`` lines on stderr. A broker that is down makes librdkafka repeat one
complaint per connection attempt; :class:`RepeatFilter` lets a line through once per
``window`` seconds (numbers ignored when comparing), and says how many it held back.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable

_NUMBERS = re.compile(r"\d+")


class RepeatFilter(logging.Filter):
    """Drops a record like one let through less than ``window`` seconds ago."""

    def __init__(self, window: float = 60.0, clock: Callable[[], float] = time.monotonic
                 ) -> None:
        super().__init__()
        self.window = window
        self._clock = clock
        self._seen: dict[str, tuple[float, int]] = {}  # key -> (last let through, held back)

    def filter(self, record: logging.LogRecord) -> bool:
        key = _NUMBERS.sub("#", record.getMessage())
        now = self._clock()
        last = self._seen.get(key)
        if last is not None and now - last[0] < self.window:
            self._seen[key] = (last[0], last[1] + 1)
            return False
        if last is not None and last[1]:
            record.msg = f"{record.getMessage()} ({last[1]} more like it in {self.window:g}s)"
            record.args = ()
        self._seen[key] = (now, 0)
        if len(self._seen) > 1000:
            self._seen.clear()
        return True


LIBRDKAFKA_LOGGER = logging.getLogger("sharedstream.librdkafka")
LIBRDKAFKA_LOGGER.addFilter(RepeatFilter())

"""Deprecated: tracing lives in :mod:`sharedstream.tracing`, a room of its own.

Kept for one release so an embedding host's ``sharedstream.core.tracing.configure()``
runs on; importing it warns (``DeprecationWarning``). Every name is read from the new
module when asked for, never copied: :data:`~sharedstream.tracing.tracer` is rebound
by ``configure``, and a copy would keep saying tracing is off.
"""

import warnings
from typing import Any

from sharedstream import tracing

warnings.warn("sharedstream.core.tracing is deprecated: import sharedstream.tracing (the same "
              "names)", DeprecationWarning, stacklevel=2)


def __getattr__(name: str) -> Any:
    return getattr(tracing, name)

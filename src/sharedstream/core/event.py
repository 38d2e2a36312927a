"""TriggerEvent: what a watcher's filter yields for the message it handles.

Declared in the core because the manager binds each one to its message window;
users import it from ``sharedstream`` (re-exported by ``sharedstream.triggers``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class TriggerEvent:
    """Something a trigger found worth an asset event. Treat it as immutable.

    ``payload`` must be JSON-serialisable to be persisted.
    """

    payload: Any

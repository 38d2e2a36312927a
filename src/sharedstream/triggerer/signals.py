"""The SIGTERM that stops a process still starting, told apart from a module's own exit.

``sharedstream`` installs its SIGTERM handler before anything heavy is imported: a
signal that reaches a process still starting (a rolling restart catching a fresh pod)
raises :class:`StoppedWhileStarting` wherever the main thread is, a watcher module's
import included, and the process exits 0. Watcher loading turns every other
``SystemExit`` raised at import (a module calling ``sys.exit(3)``) into a start-up
error; this class is how it knows the one to let through. Nothing heavy is imported
here: the CLI imports this module first.
"""

from __future__ import annotations

from types import FrameType
from typing import NoReturn


class StoppedWhileStarting(SystemExit):
    """SIGTERM before the process runs: exit 0, wherever start-up was."""


def stop_while_starting(signum: int, frame: FrameType | None) -> NoReturn:
    """The SIGTERM handler of a process still starting."""
    raise StoppedWhileStarting(0)

"""Lists of names in log lines and messages, summarised: a process may run 10,000 watchers.

A line naming every watcher of a large group is tens of kilobytes that no reader reads and
that log stores keep; a summary says how many, names the first few, and says where the
whole list is.
"""

from __future__ import annotations

from collections.abc import Iterable

SHOWN = 5


def summarise(names: Iterable[str], what: str = "watchers", *, shown: int = SHOWN,
              where: str = "the health server's /status lists them all") -> str:
    """``3 watchers: a, b, c``, or ``10,000 watchers: w0, w1, w2, w3, w4 and 9,995 more
    (<where>)`` for more than ``shown`` (sorted)."""
    ordered = sorted(names)
    if len(ordered) == 1 and what.endswith("s"):
        what = what[:-1]  # "1 watcher"
    if len(ordered) <= shown:
        return f"{len(ordered):,} {what}: {', '.join(ordered) or 'none'}"
    return (f"{len(ordered):,} {what}: {', '.join(ordered[:shown])} and "
            f"{len(ordered) - shown:,} more ({where})")


FRAMEWORK_TASK = "sharedstream: "
"""Prefix of the name of a task that does the framework's own work (a group's fan-out), so
the loop watch reports time spent there as the framework's, not a watcher's."""


def framework_task_name(what: str) -> str:
    return FRAMEWORK_TASK + what


__all__ = ["FRAMEWORK_TASK", "framework_task_name", "summarise"]

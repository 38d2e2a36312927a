"""Invariants sampled while a test runs, on a thread: for guarantees that must hold at
every moment, not only at the end (commits never past what is persisted, a watermark
never ahead of its events)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Sampler:
    """Calls ``check`` every ``interval`` s on a thread until stopped; keeps what it returned.

    ``check`` returns a list of violations (empty when the invariant holds); a
    check that raises is a violation too, so a broken sampler cannot pass silently.
    The pause between checks is far below the triggerer's commit interval (0.1 s), so a
    commit that runs ahead for one interval is looked at, not slept through.
    """

    check: Callable[[], list[str]]
    interval: float = 0.01
    samples: int = 0
    violations: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Sampler:
        self._thread = threading.Thread(target=self._run, name="faults-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.violations += self.check()
            except Exception as error:  # a sampler that cannot look is a failure, not a pass
                self.violations.append(f"sampler failed: {type(error).__name__}: {error}")
            self.samples += 1
            self._stop.wait(self.interval)

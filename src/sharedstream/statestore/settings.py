"""Settings of the state stores (the ``[state_store]`` and ``[workers]`` config sections)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# How long a SQLite connection waits for another one's lock, by default (seconds).
SQLITE_BUSY_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class StateStoreSettings:
    """What the config file says about the state stores.

    ``backend`` and ``payload_backend`` are ``None`` when the option is absent (use the
    default). An option that is present but empty is a configuration mistake, not a request
    for the default, so it raises ``ValueError`` here, at load time, instead of silently
    falling back.

    * ``default_retention_days``: days a task-state value lives when it is set with
      ``retention=None``; 0 = never expire.
    * ``max_value_storage_bytes``: largest value one key may hold, in UTF-8 bytes of
      its JSON; a larger one raises ``ValueTooLargeError``.
    * ``clear_on_success``: delete a task scope's keys when the task is marked
      successful.
    * ``state_cleanup_batch_size``: rows deleted per transaction by
      ``sharedstream state-store clean`` and ``sharedstream events clean``
      (0 = everything in one statement).
    * ``backend``: dotted path of a ``StateBackend`` subclass to use instead of the
      built-in database backend.
    * ``sqlite_busy_timeout``: seconds a SQLite connection waits for another
      connection's lock on the file before its statement fails with "database is
      locked" (a transient error: the unit of work is held and retried); other
      databases ignore it.
    * ``payload_backend`` / ``payload_dir``: ``[workers] state_backend`` and
      ``state_dir``, handed over by the config loader.
    """

    default_retention_days: int = 30
    max_value_storage_bytes: int = 65535
    clear_on_success: bool = False
    state_cleanup_batch_size: int = 0
    backend: str | None = None
    sqlite_busy_timeout: float = SQLITE_BUSY_TIMEOUT_S
    payload_backend: str | None = None
    payload_dir: str | None = None

    def __post_init__(self) -> None:
        for name in ("default_retention_days", "max_value_storage_bytes",
                     "state_cleanup_batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"[state_store] {name} must be an integer, got {value!r}")
        if self.default_retention_days < 0:
            raise ValueError("[state_store] default_retention_days must be >= 0 (0 = never)")
        if self.max_value_storage_bytes <= 0:
            raise ValueError("[state_store] max_value_storage_bytes must be > 0")
        if self.state_cleanup_batch_size < 0:
            raise ValueError("[state_store] state_cleanup_batch_size must be >= 0 (0 = one go)")
        timeout = self.sqlite_busy_timeout
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout < 0:
            raise ValueError("[state_store] sqlite_busy_timeout must be a number of seconds "
                             f">= 0, got {timeout!r}")
        if not isinstance(self.clear_on_success, bool):
            raise TypeError("[state_store] clear_on_success must be a boolean")
        if self.backend is not None and not self.backend.strip():
            raise ValueError("[state_store] backend is set but empty; remove it for the default")
        if self.payload_backend is not None and not self.payload_backend.strip():
            raise ValueError("[workers] state_backend is set but empty; remove it for none")

    def resolved_payload_dir(self) -> Path:
        """Directory of the filesystem payload backend (default ``./sharedstream-state``)."""
        return Path(self.payload_dir) if self.payload_dir else Path("sharedstream-state")

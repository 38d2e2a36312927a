"""The console's reads of the broker's view of consumer groups (``sharedstream offsets
show``: committed offsets, remembered progress, log start and end, per partition).

Each group's positions are read at most every two seconds (``OFFSETS_TTL_S``), on the
console's own few threads, one read per group at a time. The group page waits for a
fresh read; the overview and the lag sampler take the last one at once (waiting only
for a group's first), so a broker that does not answer slows no page that lists every
group, and ties up no worker thread per request.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from sharedstream.kafka.connections import ConnectionConfigError, resolve_connection
from sharedstream.ops.clitools import CommandError
from sharedstream.ops.offsets import GroupOffsets, GroupPositions, show
from sharedstream.web.caches import Refreshed
from sharedstream.web.settings import ConsoleSettings

OFFSETS_TTL_S = 2.0
Positions = tuple[GroupPositions | None, str | None]  # the positions, or why there are none


class KafkaReads:
    """The console's reads of the broker's view of groups (``Sources.kafka``)."""

    def __init__(self, settings: ConsoleSettings) -> None:
        self.settings = settings
        self._admins: dict[tuple[str, str], GroupOffsets] = {}
        self._admin_lock = threading.Lock()
        self._positions: Refreshed[Positions] = Refreshed(self._read_positions, OFFSETS_TTL_S)

    def _connection(self, connection_id: str | None) -> Mapping[str, Any]:
        return resolve_connection(connection_id or self.settings.connection,
                                  self.settings.connections)

    def close(self) -> None:
        """Wait for the reads in flight, then release the cached admin clients on this
        thread (see :class:`GroupOffsets`), once no request runs any more (at shutdown)."""
        self._positions.close()
        with self._admin_lock:
            for admin in self._admins.values():
                admin.close()
            self._admins.clear()

    def _admin(self, group: str, connection_id: str | None) -> GroupOffsets:
        key = (group, connection_id or self.settings.connection)
        with self._admin_lock:
            admin = self._admins.get(key)
            if admin is None:
                if len(self._admins) > 64:
                    self._admins.clear()  # not closed: a request may still be using one
                admin = self._admins[key] = GroupOffsets(
                    self._connection(connection_id), group, self.settings.kafka_timeout)
            return admin

    def _read_positions(self, key: tuple[str, str | None]) -> Positions:
        group, connection_id = key
        try:
            return show(self._admin(group, connection_id)), None
        except (CommandError, ConnectionConfigError) as exc:
            return None, str(exc)
        except Exception as exc:  # librdkafka's own errors: one line, no config
            return None, f"kafka: {type(exc).__name__}"

    async def positions(self, group: str, connection_id: str | None, *,
                        fresh: bool) -> Positions:
        """The group's positions; ``fresh``: at most two seconds old (waiting for a read),
        else the last read at once (while a newer one is made)."""
        return await self._positions.get((group, connection_id), fresh=fresh)

    def refresh_positions(self, group: str, connection_id: str | None) -> None:
        """Read the group's positions anew in the background, if the last read is old."""
        self._positions.refresh((group, connection_id))

    def last_positions(self, group: str, connection_id: str | None, max_age: float
                       ) -> GroupPositions | None:
        """The last positions read, if at most ``max_age`` seconds old (never waits)."""
        found = self._positions.peek((group, connection_id))
        if found is None or found[0] > max_age:
            return None
        return found[1][0]

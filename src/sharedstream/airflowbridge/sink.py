"""``AirflowAssetSinkTrigger``: Kafka -> Airflow, the receiving half of the asset bridge.

Each record on the bridge topic is an :class:`~sharedstream.airflowbridge.envelope.Envelope`
published by ``sharedstream publish-airflow``. For each one, and each target instance
(``[airflow.<name>]`` sections, the envelope's own source excluded), the sink:

1. skips the target if its state store says it was already delivered there
   (key ``delivered/<target>/<source>/<event id>``);
2. resolves the asset id by name + uri (``GET /api/v2/assets``, cached per target);
   an asset missing in the target rejects the record with a clear reason (DLQ);
3. looks in the target for an event of that asset already carrying this envelope's
   marker (created by an earlier attempt whose acknowledgement was lost);
4. otherwise ``POST /api/v2/assets/events`` with the source's ``extra`` plus the marker.

The record is acknowledged only when every target is done: the delivered keys are
staged into the message's unit of work, with one event recording the delivery, and
commit together before the offset moves. A target that cannot answer (down, 5xx,
429, authentication) raises :class:`~sharedstream.airflowbridge.client.AirflowUnavailableError`,
an ``InfrastructureError``: the manager holds the record and redelivers it with
capped backoff for as long as the outage lasts, and never dead-letters it (it does
not count towards ``max_attempts``). Any other 4xx rejects with the target's answer.

Duplicates: step 1 covers every redelivery after a committed unit of work; step 3
covers a crash (or a partial failure across several targets) between a 2xx POST and
that commit. What is left: step 3 looks back ``duplicate_check_window`` seconds
before the source event's timestamp, so a target whose clock runs behind the
source's by more than that could receive a second event after such a crash; and two
sinks racing on one record (only during a consumer-group rebalance) could both post.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from datetime import timedelta
from typing import Any

from sharedstream.airflowbridge.client import AirflowClient, AirflowRequestError
from sharedstream.airflowbridge.envelope import MARKER, Envelope, EnvelopeError, parse_timestamp
from sharedstream.airflowbridge.runtime import airflow_instances
from sharedstream.core.message import KafkaMessage
from sharedstream.triggers.base import TriggerEvent, reject_shared_stream_event
from sharedstream.triggers.kafka import KafkaSharedStreamTrigger

log = logging.getLogger(__name__)


class AssetMissingError(Exception):
    """The target has no asset with the envelope's name and uri."""


class AirflowAssetSinkTrigger(KafkaSharedStreamTrigger):
    """Creates each bridged asset event in every target instance, once.

    ``targets`` name ``[airflow.<name>]`` sections of the config file read from
    ``config_path`` (default: ``$SHAREDSTREAM_CONFIG``, else ``./sharedstream.toml``),
    loaded when the filter starts; a config problem then fails the filter before it
    takes a message, so it is retried with backoff and nothing is rejected for it.
    """

    def __init__(self, *, topics: Sequence[str], targets: Sequence[str],
                 kafka_config_id: str = "kafka_default", poll_timeout: float = 1.0,
                 dlq_topic: str | None = None, config_path: str | None = None,
                 duplicate_check_window: float = 300.0) -> None:
        super().__init__(topics=topics, kafka_config_id=kafka_config_id,
                         poll_timeout=poll_timeout, dlq_topic=dlq_topic)
        if isinstance(targets, str) or not targets:
            raise ValueError("targets must be a non-empty list of [airflow.<name>] names")
        self.targets = list(targets)
        self.config_path = config_path
        self.duplicate_check_window = duplicate_check_window
        self._clients: dict[str, AirflowClient] = {}

    def serialize(self) -> tuple[str, dict[str, Any]]:
        classpath, kwargs = super().serialize()
        return classpath, {**kwargs, "targets": list(self.targets),
                           "config_path": self.config_path,
                           "duplicate_check_window": self.duplicate_check_window}

    def _connect(self) -> None:
        instances = airflow_instances(self.config_path)
        missing = [t for t in self.targets if t not in instances]
        if missing:
            raise LookupError(f"no [airflow.<name>] section for target(s) {missing}")
        self._clients = {t: AirflowClient(t, instances[t]) for t in self.targets}

    async def filter_shared_stream(self, stream: AsyncIterator[Any]) -> AsyncIterator[TriggerEvent]:
        if not self._clients:
            self._connect()
        message: KafkaMessage
        async for message in stream:
            try:
                envelope = Envelope.from_bytes(message.value)
            except EnvelopeError as exc:
                reject_shared_stream_event(f"not a bridge envelope: {exc}")
                continue
            try:
                delivered = await self._deliver_all(envelope)
            except (AssetMissingError, AirflowRequestError) as exc:
                reject_shared_stream_event(str(exc))
                continue
            if delivered:
                yield TriggerEvent({"source": envelope.source, "event_id": envelope.event_id,
                                    "asset_uri": envelope.asset_uri, "targets": delivered})

    async def _deliver_all(self, envelope: Envelope) -> dict[str, int | None]:
        """Deliver to every target not done yet; stage their delivered keys.

        Returns ``{target: id of the event created there, or None if found there}``.
        """
        store = self.asset_state_store
        delivered: dict[str, int | None] = {}
        for target, client in self._clients.items():
            if target == envelope.source:
                continue
            key = f"delivered/{target}/{envelope.source}/{envelope.event_id}"
            if await store.aget(key) is not None:
                continue
            delivered[target] = await self._deliver(client, envelope)
        for target, created in delivered.items():
            await store.aset(f"delivered/{target}/{envelope.source}/{envelope.event_id}",
                             {"target_event_id": created})
        return delivered

    async def _deliver(self, client: AirflowClient, envelope: Envelope) -> int | None:
        asset_id = await client.resolve_asset(envelope.asset_name, envelope.asset_uri)
        if asset_id is None:
            raise AssetMissingError(
                f"airflow {client.name!r} has no asset name={envelope.asset_name!r} "
                f"uri={envelope.asset_uri!r}")
        since = parse_timestamp(envelope.timestamp) - timedelta(
            seconds=self.duplicate_check_window)
        if await client.has_marked_event(asset_id, MARKER, envelope.marker(), since):
            log.info("airflow %r already has event %s of %r: not posted again",
                     client.name, envelope.event_id, envelope.source)
            return None
        try:
            created = await client.create_asset_event(asset_id, envelope.bridged_extra())
        except AirflowRequestError as exc:
            if exc.status != 404:
                raise
            # A stale cached id (the asset was re-created): resolve once more.
            asset_id = await client.resolve_asset(envelope.asset_name, envelope.asset_uri,
                                                  refresh=True)
            if asset_id is None:
                raise AssetMissingError(f"{exc} (asset no longer exists)") from None
            created = await client.create_asset_event(asset_id, envelope.bridged_extra())
        return int(created["id"])

"""``[destinations.<id>]``: where persisted asset events are delivered.

Each table names a ``kind`` and that kind's options; every option can also come from
the environment, one variable per key, so a secret never has to sit in the file:
``SHAREDSTREAM__DESTINATIONS__<ID>__<KEY>`` (the id and key upper-cased).

Common options:

* ``kind``: ``airflow``, ``webhook`` or ``kafka``.
* ``assets``: asset names or globs (``orders_*``) whose events go there; default all.
* ``start``: where a destination seen for the first time begins: ``latest`` (only
  events persisted from then on, the default) or ``earliest`` (every stored event).
* ``batch_size``: events read and sent per round.
* ``retry_initial`` / ``retry_max``: the backoff (seconds, jittered) while the
  destination fails transiently; its cursor holds meanwhile.
* ``lease_seconds``: how long one process may deliver for the destination without
  renewing its lease; other processes take over after that.

Kept free of HTTP and Kafka imports, so the config loader validates these tables
without the optional extras installed. Secrets are excluded from ``repr``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

KINDS = ("airflow", "webhook", "kafka")
VALUE_FORMATS = ("json", "json_schema", "avro")


@dataclass(frozen=True, slots=True)
class AirflowDestination:
    """``kind = "airflow"``: ``POST /api/v2/assets/events`` on an Airflow 3 API server.

    * ``instance``: the ``[airflow.<name>]`` section to reach (URL and credentials).
    * ``match``: how a sharedstream asset finds its Airflow asset: ``name`` (the default)
      or ``uri`` (the sharedstream asset's uri).
    * ``asset_map``: explicit ``{sharedstream asset name = "Airflow asset name or uri"}``
      (by ``match``), for assets named differently on each side.
    * ``pace_seconds``: the least time between two events of one asset. Airflow merges
      events posted faster than its scheduler loop into one asset-triggered run; pace
      (about 2 s) when every event must start its own run. 0 posts as fast as it can.
    """

    instance: str
    match: str = "name"
    asset_map: dict[str, str] = field(default_factory=dict)
    pace_seconds: float = 0.0

    def __post_init__(self) -> None:
        if self.match not in ("name", "uri"):
            raise ValueError("match must be 'name' or 'uri'")
        if self.pace_seconds < 0:
            raise ValueError("pace_seconds must be >= 0")


@dataclass(frozen=True, slots=True)
class WebhookDestination:
    """``kind = "webhook"``: one JSON ``POST`` per event.

    * ``url``: where to post.
    * ``secret``: the shared secret of the ``X-Sharedstream-Signature`` header
      (``sha256=`` + the HMAC-SHA256 of the body, hex).
    * ``timeout``: seconds per request.
    """

    url: str
    secret: str = field(repr=False)
    timeout: float = 10.0

    def __post_init__(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise ValueError("url must start with http:// or https://")
        if not self.secret:
            raise ValueError("secret must not be empty")
        if not self.timeout > 0:
            raise ValueError("timeout must be > 0")


@dataclass(frozen=True, slots=True)
class KafkaDestination:
    """``kind = "kafka"``: one record per event on ``topic``, keyed by asset name.

    * ``topic``: the topic to write to.
    * ``connection``: the ``[connections.<id>]`` to produce with (``kafka_default``).
    * ``value_format``: ``json`` (the event document as JSON), or ``json_schema`` or
      ``avro``: the document serialised with a schema registered in ``schema_registry``
      under ``<topic>-value``, Confluent-framed, for consumers that read typed values.
    * ``schema_registry``: the ``[schema_registries.<id>]`` of ``json_schema`` and
      ``avro`` (``schema_registry_default``).
    * ``payload_schema``: the schema of the events' ``payload``, as JSON text: an Avro
      type (required with ``avro``) or a JSON Schema (with ``json_schema``; default:
      any JSON value).
    """

    topic: str
    connection: str = "kafka_default"
    value_format: str = "json"
    schema_registry: str = "schema_registry_default"
    payload_schema: str | None = None

    def __post_init__(self) -> None:
        if self.value_format not in VALUE_FORMATS:
            raise ValueError(f"value_format must be one of {', '.join(VALUE_FORMATS)}")
        if self.value_format == "avro" and not self.payload_schema:
            raise ValueError("value_format 'avro' needs payload_schema, the Avro type of "
                             "the events' payload (JSON text)")
        if self.payload_schema is not None:
            try:
                json.loads(self.payload_schema)
            except ValueError as exc:
                raise ValueError(f"payload_schema is not JSON text ({exc})") from None


Options = AirflowDestination | WebhookDestination | KafkaDestination
OPTION_TYPES: dict[str, type[Any]] = {"airflow": AirflowDestination,
                                      "webhook": WebhookDestination,
                                      "kafka": KafkaDestination}


@dataclass(frozen=True, slots=True)
class CommonOptions:
    """The options every kind takes (the rest of the table is the kind's).

    * ``kind``: ``airflow``, ``webhook`` or ``kafka``.
    * ``assets``: asset names or globs whose events go there (default: all).
    * ``start``: ``latest`` or ``earliest``: where a new destination's cursor begins.
    * ``batch_size``: events read and sent per round.
    * ``retry_initial``: first backoff (seconds) after a transient failure.
    * ``retry_max``: the largest backoff (seconds); each wait is jittered.
    * ``lease_seconds``: how long a process delivers without renewing its lease.
    """

    kind: str
    assets: list[str] = field(default_factory=lambda: ["*"])
    start: str = "latest"
    batch_size: int = 200
    retry_initial: float = 0.5
    retry_max: float = 30.0
    lease_seconds: float = 30.0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}")
        if not self.assets or not all(isinstance(a, str) and a for a in self.assets):
            raise ValueError("assets must be a non-empty list of names or globs")
        if self.start not in ("latest", "earliest"):
            raise ValueError("start must be 'latest' or 'earliest'")
        if self.batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if not 0 < self.retry_initial <= self.retry_max:
            raise ValueError("need 0 < retry_initial <= retry_max")
        if not self.lease_seconds > 0:
            raise ValueError("lease_seconds must be > 0")


@dataclass(frozen=True, slots=True)
class DestinationSettings:
    """One destination: its id, the common options and its kind's options."""

    id: str
    common: CommonOptions
    options: Options

"""``sharedstream deliver`` alone is seen as ``run`` is: ``/livez``, ``/readyz``, ``/metrics``.

The documented split deployment: ``run --no-delivery`` ingests, a separate ``deliver``
process forwards the persisted events to a real webhook server. The deliverer serves
health on ``[triggerer] health_port`` (a free port here, read from its start-up line);
its readiness turns 503 naming the destination while the webhook fails and back to
200 once it delivers again, and its metrics are the delivery and event-loop families of
the catalog, counting what the webhook server acknowledged.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from streams import produce
from triggerer import COMMAND, Triggerer, until, write_config

from sharedstream.triggerer.metrics import CATALOG
from webhook_server import WebhookServer

ENV = {"SHAREDSTREAM__DESTINATIONS__HOOKS__SECRET": "s3cret"}


class Deliverer(Triggerer):
    """``sharedstream deliver --config CONFIG``, driven like a triggerer process."""

    def start(self, *extra_args: str) -> Deliverer:
        self.starts += 1
        self.log_path = self.log_dir / f"deliver-{self.starts}.log"
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [*COMMAND, "deliver", "--config", str(self.config), *extra_args],
                cwd=self.log_dir, env=env, stdout=log, stderr=subprocess.STDOUT)
        return self


def test_deliver_serves_livez_readyz_naming_a_failing_destination_and_metrics(
        tmp_path: Path, sqlite_url: str, kafka_bootstrap: str, connection: dict[str, Any],
        create_topic: Callable[..., str], triggerers: Callable[..., Triggerer]) -> None:
    topic = create_topic("orders")
    failing = threading.Event()
    with WebhookServer(lambda _doc, _n: 503 if failing.is_set() else 200) as server:
        hooks = {"kind": "webhook", "url": server.url, "start": "earliest",
                 "retry_initial": 0.05, "retry_max": 0.2}
        config = write_config(tmp_path / "sharedstream.toml", database_url=sqlite_url,
                              connection=connection, tables={"destinations.hooks": hooks})
        ingest = triggerers(config, env={"E2E_TOPIC": topic, "E2E_WATCHERS": "everything",
                                         **ENV}, args=("--no-delivery",)).start()
        ingest.wait_ready()
        deliver_dir = tmp_path / "deliver"
        deliver_dir.mkdir()
        deliverer = Deliverer(Path(), config, deliver_dir, env=ENV).start()
        try:
            assert deliverer.get("/livez")[0] == 200
            deliverer.wait_ready()
            produce(kafka_bootstrap, topic, range(10), 1)
            until(lambda: len(server.acked()) == 10, "10 events delivered by `deliver`")
            delivered = 'sharedstream_events_delivered_total{destination="hooks"} 10.0'
            # The deliverer counts once its sender has heard back, just after the server.
            until(lambda: delivered in deliverer.get("/metrics")[1], "10 deliveries counted")
            metrics = deliverer.get("/metrics")[1]
            assert 'sharedstream_delivery_holder{destination="hooks"} 1.0' in metrics
            assert 'sharedstream_delivery_lag_events{destination="hooks"} 0.0' in metrics
            assert re.search(r"^sharedstream_event_loop_lag_seconds \S+$", metrics, re.M)
            declared = {spec.full_name: spec.help for spec in CATALOG}
            scraped = {name.removesuffix("_total"): text for name, text in
                       re.findall(r"^# HELP (sharedstream_\w+) (.*)$", metrics, re.M)}
            assert scraped and all(declared.get(name) == text
                                   for name, text in scraped.items()), scraped

            failing.set()
            produce(kafka_bootstrap, topic, range(10, 11), 1)

            def not_ready() -> str | None:
                status, body = deliverer.get("/readyz")
                return body if status == 503 else None

            reason = until(not_ready, "/readyz 503 while the webhook answers 503")
            assert "destination hooks: failing" in reason and "503" in reason, reason
            assert deliverer.get("/livez")[0] == 200
            failing.clear()
            deliverer.wait_ready()
            until(lambda: any(r.document["payload"]["id"] == 10 for r in server.acked()),
                  "the event refused meanwhile delivered")
            deliverer.signal(signal.SIGTERM)
            assert deliverer.wait() == 0
        finally:
            deliverer.kill()
        ingest.signal(signal.SIGTERM)
        assert ingest.wait() == 0

"""``sharedstream publish-airflow``: run the Airflow -> Kafka publisher of one instance."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

import click

from sharedstream.ops.clitools import EXIT_FAILURE as EXIT_RUNTIME
from sharedstream.ops.clitools import EXIT_USAGE
from sharedstream.triggerer.extras import missing_module


@click.command("publish-airflow")
@click.option("--instance", required=True, help="The [airflow.<name>] section to read from.")
@click.option("--topic", required=True, help="Kafka topic to publish the envelopes to.")
@click.option("--config", "config_path", metavar="PATH", type=click.Path(dir_okay=False),
              help="sharedstream.toml (default: $SHAREDSTREAM_CONFIG or ./sharedstream.toml).")
@click.option("--connection", "connection_id", default="kafka_default", show_default=True,
              help="Kafka connection id ([connections.<id>] or SHAREDSTREAM_CONN_<ID>).")
@click.option("--once", is_flag=True, help="One pass, then exit (0 when it succeeded).")
@click.option("--interval", default=5.0, show_default=True, type=click.FloatRange(min=0.01),
              help="Seconds between passes (and before retrying a failed one).")
@click.option("--batch-size", default=500, show_default=True, type=click.IntRange(min=1),
              help="Most events per pass.")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
              help="Least severity logged (to stderr).")
def publish_airflow(instance: str, topic: str, config_path: str | None, connection_id: str,
                    once: bool, interval: float, batch_size: int, log_level: str) -> None:
    """Publish INSTANCE's asset events to TOPIC; the cursor lives in the asset state store."""
    from confluent_kafka import Producer

    try:
        from sharedstream.airflowbridge.client import AirflowClient
        from sharedstream.airflowbridge.publisher import AirflowPublisher
    except ModuleNotFoundError as exc:
        click.echo(f"error: publish-airflow needs {missing_module(exc)}", err=True)
        sys.exit(EXIT_USAGE)
    from sharedstream.kafka.connections import (
        ConnectionConfigError,
        producer_config,
        resolve_connection,
    )
    from sharedstream.triggerer.config import ConfigError, load_config
    from sharedstream.triggerer.plan import StartupError
    from sharedstream.triggerer.startup import open_store

    logging.basicConfig(level=log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise
    try:
        config = load_config(config_path)
        if instance not in config.airflow:
            raise ConfigError(f"no [airflow.{instance}] section in the configuration")
        connection = resolve_connection(connection_id, config.connections)
        store = open_store(config, upgrade=False)  # an empty database gets the schema
    except (ConfigError, ConnectionConfigError, StartupError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_USAGE)

    async def main() -> int:
        client = AirflowClient(instance, config.airflow[instance])
        publisher = AirflowPublisher(client=client, producer=Producer(producer_config(connection)),
                                     topic=topic, store=store, batch_size=batch_size)
        try:
            if once:
                result = await publisher.publish_once()
                click.echo(f"published {result.published}, skipped {result.skipped_bridged} "
                           f"bridged, cursor {result.cursor}")
                return 0
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stop.set)
            await publisher.run(stop, interval)
            return 0
        finally:
            await client.aclose()

    try:
        code = asyncio.run(main())
    except Exception as exc:
        click.echo(f"error: {type(exc).__name__}: {exc}", err=True)
        code = EXIT_RUNTIME
    finally:
        store.close()
    sys.exit(code)

"""An asyncio service of your own that runs the triggerer inside it (no config file).

The service answers ``GET /`` on port 8080 with the number of events its watchers
have persisted, the way an existing service might expose its own endpoints. The
triggerer runs in the same event loop, started with its settings and assets as
objects: the assets of ``orders_watchers.py`` beside this file.

SIGTERM or Ctrl-C cancels the service's main task; leaving the ``async with`` block
then stops fetching, commits what the watchers persisted and returns, so a restart
reads only what was not committed. A triggerer that cannot start (a topic missing, the
database not answering) or that stops by itself (``TriggererFailed``) ends the service
with one ``error:`` line and exit code 1, for its supervisor to restart it.

Run (a Kafka broker with the topics ``orders``, ``orders.dlq`` and
``orders.dlq.replay``)::

    KAFKA_BOOTSTRAP=127.0.0.1:9092 python examples/embedded_service.py

``PORT`` moves the endpoint off 8080 (0: a free port, logged).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys

import sqlalchemy as sa
from orders_watchers import orders_audit, paid_orders, valid_orders

from sharedstream.triggerer import (
    Config,
    DatabaseSettings,
    ProcessSettings,
    StartupError,
    Triggerer,
    TriggererFailed,
    UnavailableError,
)

DATABASE_URL = os.environ.get("DATABASE_URL", "sqlite:///embedded.db")
PORT = int(os.environ.get("PORT", "8080"))


def settings() -> Config:
    """The triggerer's settings in code: what sharedstream.toml would hold."""
    return Config(
        database=DatabaseSettings(url=DATABASE_URL),
        process=ProcessSettings(health_port=-1),  # the service has its own endpoints
        connections={"kafka_default": {
            "bootstrap.servers": os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092"),
            "group.id": "embedded-service"}})


def persisted_events(engine: sa.Engine) -> int:
    with engine.connect() as connection:
        return int(connection.execute(sa.text("SELECT count(*) FROM asset_event")).scalar_one())


async def answer(engine: sa.Engine, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
    """The service's own endpoint: a one-line HTTP answer."""
    await reader.readline()
    count = await asyncio.to_thread(persisted_events, engine)
    body = f"{count} events persisted\n".encode()
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: "
                 + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n" + body)
    await writer.drain()
    writer.close()


async def service() -> None:
    engine = sa.create_engine(DATABASE_URL)
    server = await asyncio.start_server(lambda r, w: answer(engine, r, w), "127.0.0.1", PORT)
    port = server.sockets[0].getsockname()[1]
    try:
        async with server, Triggerer(settings(),
                                     assets=[valid_orders, paid_orders, orders_audit]):
            logging.info("serving on http://127.0.0.1:%d/ with the triggerer embedded", port)
            await server.serve_forever()
    finally:
        engine.dispose()


async def main() -> int:
    """Run the service until a signal (exit 0) or a triggerer failure (exit 1)."""
    task = asyncio.create_task(service())
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, task.cancel)
    try:
        await task
    except asyncio.CancelledError:
        logging.info("stopped")
    except (StartupError, UnavailableError, TriggererFailed) as exc:
        print(f"error: {exc}", file=sys.stderr)  # what was persisted is committed already
        return 1
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: "
                                                   "%(message)s")
    sys.exit(asyncio.run(main()))

"""``sharedstream web``: serve the console and its REST API.

Importable without the ``web`` extra: FastAPI, Jinja2 and uvicorn load when the
command runs, so a missing extra is one ``error:`` line naming
``pip install 'sharedstream[web]'`` (exit 2), as is a refused setting (a bind
address other than loopback without a token). The database must carry this
version's schema (``sharedstream db upgrade``); Kafka is reached per request, and a
broker that does not answer shows on the pages, it does not stop the console.
"""

from __future__ import annotations

import os
import socket
from typing import Any

import click

from sharedstream.ops.clitools import (
    EXIT_USAGE,
    command_config,
    database_options,
    fail,
    handled,
    kafka_connection_option,
    open_store,
)
from sharedstream.triggerer.config import parse_networks
from sharedstream.web.settings import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    OPERATE_ENV,
    TOKEN_ENV,
    ConsoleSettings,
    ConsoleSettingsError,
    config_token,
    take_env_token,
)


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: a free one), IPv6 when ``host`` is."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError:
        sock.close()
        raise
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


@click.command("web")
@click.option("--host", default=DEFAULT_HOST, show_default=True,
              help="Address to listen on. Anything but loopback requires a token.")
@click.option("--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT,
              show_default=True, help="Port to listen on (0: any free port, printed at start).")
@database_options
@kafka_connection_option
@click.option("--dlq-topic", "dlq_topics", multiple=True, metavar="TOPIC",
              help="A dead-letter topic to show, read with --connection (repeatable).")
@click.option("--token", metavar="TOKEN",
              help=f"Require this token on every request (bearer, or the basic-auth "
                   f"password); default ${TOKEN_ENV}. At least 16 characters.")
@click.option("--sample-interval", type=click.FloatRange(min=0.2), default=5.0,
              show_default=True, metavar="SECONDS",
              help="Seconds between background lag samples (the group charts keep an hour).")
@click.pass_context
@handled
def web(ctx: click.Context, /, host: str, port: int, dlq_topics: tuple[str, ...],
        token: str | None, sample_interval: float, connection: str, **_: Any) -> None:
    """Serve the console and REST API (/api/v1) over every triggerer of the database:
    processes, groups and lag, held messages, assets and events, state, rejections and
    dead letters, destinations; and, with an operate token ([web] operate_tokens), the
    actions: retry a held message, replay dead letters, reset offsets, forget a stale
    triggerer, each audited."""
    env_token = take_env_token()
    config = command_config(ctx)
    os.environ.pop(OPERATE_ENV, None)  # read into the config; children need not inherit it
    try:
        settings = ConsoleSettings(
            host=host, port=port, token=token or env_token or config_token(config),
            operate_tokens=config.web.operate_tokens,
            connection=connection, connections=config.connections,
            dlq_topics=tuple(dict.fromkeys(dlq_topics)),
            destinations={d.id: d.common.kind for d in config.destinations.values()},
            sample_interval=sample_interval,
            status_networks=parse_networks(config.web.status_networks))
    except ConsoleSettingsError as exc:
        raise fail(str(exc), EXIT_USAGE) from None
    import uvicorn

    from sharedstream.web.app import create_app

    store = open_store(ctx)
    app = create_app(settings, store)
    try:
        sock = bind(host, port)
    except OSError as exc:
        raise fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}", 1) from None
    shown = f"[{host}]" if ":" in host else host
    click.echo(f"console on http://{shown}:{sock.getsockname()[1]}/ (API /api/v1, "
               f"OpenAPI /api/v1/openapi.json){'; token required' if settings.needs_token else ''}"
               f"; {len(settings.operate_tokens)} operate token(s)")
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False,
                                           server_header=False, lifespan="on"))
    server.run(sockets=[sock])

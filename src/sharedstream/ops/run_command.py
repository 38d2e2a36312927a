"""``sharedstream run`` and ``sharedstream deliver``: the long-running processes.

Exit codes: 0 after a clean stop, 1 on a runtime failure (a broker or database that
does not answer: a supervisor may retry), 2 on a configuration or start-up error
(nothing was started; retrying cannot help).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from sharedstream.ops.exitcodes import EXIT_FAILURE, EXIT_USAGE

F = TypeVar("F", bound=Callable[..., Any])

# How long spans still queued at exit may take to reach the collector (after the
# process's own shutdown, inside the pod's grace period).
TRACING_FLUSH_S = 5.0


def process_options(fn: F) -> F:
    """``--config``, ``--log-level`` and ``--log-format``, shared by the long-running
    commands."""
    fn = click.option("--log-format", type=click.Choice(["text", "json"]), default="text",
                      show_default=True,
                      help="json: one JSON object per line, with watcher, group, topic, "
                           "partition and offset where known.")(fn)
    fn = click.option("--log-level", default="INFO", show_default=True,
                      type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"],
                                        case_sensitive=False),
                      help="Least severity logged (to stderr).")(fn)
    fn = click.option("--config", "config_path", metavar="PATH",
                      type=click.Path(dir_okay=False),
                      help="sharedstream.toml (default: $SHAREDSTREAM_CONFIG or "
                           "./sharedstream.toml).")(fn)
    return fn


def start(log_level: str, log_format: str, body: Callable[..., int],
          config_path: str | None, *, traced: bool = False) -> None:
    """Load the config, run ``body(config)`` and exit with its code; a configuration or
    start-up problem is one ``error:`` line and exit 2. ``traced``: tracing is on while
    ``body`` runs when the ``OTEL_*`` environment asks for it (see sharedstream.tracing)."""
    from sharedstream import tracing
    from sharedstream.tracing.export import TracingConfigError
    from sharedstream.triggerer.config import ConfigError, load_config
    from sharedstream.triggerer.logs import configure_logging
    from sharedstream.triggerer.plan import StartupError, UnavailableError

    configure_logging(log_level, log_format)
    try:
        config = load_config(config_path)
        if traced:
            tracing.configure()
        code = body(config)
    except (ConfigError, StartupError, TracingConfigError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    except UnavailableError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_FAILURE)
    finally:
        tracing.shutdown(TRACING_FLUSH_S)
    sys.exit(code)


def with_database(config: Any, database_url: str | None) -> Any:
    """``config`` with ``--database-url`` in place of ``[database] url`` when given."""
    if database_url is None:
        return config
    return dataclasses.replace(config, database=dataclasses.replace(config.database,
                                                                     url=database_url))


@click.command("run")
@click.argument("watchers", metavar="WATCHERS...", nargs=-1, required=True)
@process_options
@click.option("--takeover", is_flag=True,
              help="Record this process's watcher set for its groups even if it differs.")
@click.option("--upgrade", is_flag=True, help="Migrate an older database schema first.")
@click.option("--database-url", metavar="URL",
              help="SQLAlchemy URL; overrides [database] url.")
@click.option("--no-delivery", "no_delivery", is_flag=True,
              help="Do not deliver to [destinations] here (run `sharedstream deliver` "
                   "elsewhere).")
def run(watchers: tuple[str, ...], config_path: str | None, takeover: bool, upgrade: bool,
        no_delivery: bool, database_url: str | None, log_level: str, log_format: str) -> None:
    """Run the triggerer on WATCHERS: Python files, module paths or folders of modules."""
    from sharedstream.triggerer.gctune import pause_collections, resume_collections

    pause_collections()  # until start-up is over (see triggerer/gctune.py)
    try:
        from sharedstream.triggerer.embedded import run_triggerer
        from sharedstream.triggerer.process import RunOptions

        options = RunOptions(takeover=takeover, upgrade=upgrade, deliver=not no_delivery)
        start(log_level, log_format,
              lambda config: run_triggerer(with_database(config, database_url), watchers,
                                           options),
              config_path, traced=True)
    finally:
        resume_collections()  # a start-up that failed before run_triggerer's tune_gc


@click.command("deliver")
@process_options
def deliver(config_path: str | None, log_level: str, log_format: str) -> None:
    """Deliver persisted asset events to the [destinations], without ingesting.

    Any number of processes may deliver the same destinations: each destination is
    delivered by one of them at a time (a lease in the database).
    """
    from sharedstream.triggerer.deliver import run_delivery

    start(log_level, log_format, run_delivery, config_path, traced=True)


@click.command("check")
@click.argument("watchers", metavar="WATCHERS...", nargs=-1, required=True)
@process_options
@click.option("--takeover", is_flag=True,
              help="Check as `run --takeover` would (a changed watcher set is accepted).")
@click.option("--all-watchers", "every_watcher", is_flag=True,
              help="Name every watcher of each group (by default: how many, the first "
                   "five).")
def check(watchers: tuple[str, ...], config_path: str | None, takeover: bool,
          every_watcher: bool, log_level: str, log_format: str) -> None:
    """Check everything `run WATCHERS` checks before it reads a message, then exit.

    The config, the watcher modules, the connections and their topics, the database and
    its schema, the recorded watcher sets and the destinations; nothing is changed.
    Exits 0 when `run` would start, else as `run` would fail.
    """
    from sharedstream.tracing import checked_exporter
    from sharedstream.triggerer.startup import check_startup

    def body(config: Any) -> int:
        checked_exporter()  # the OTEL_* settings run would refuse
        for line in check_startup(config, watchers, takeover=takeover,
                                  every_watcher=every_watcher):
            click.echo(f"ok: {line}")
        return 0

    start(log_level, log_format, body, config_path)

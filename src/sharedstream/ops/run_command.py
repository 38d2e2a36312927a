"""``sharedstream run``: start the triggerer process on a watcher module.

Exit codes: 0 after a clean stop, 1 on a runtime failure, 2 on a configuration or
start-up error (nothing was started).
"""

from __future__ import annotations

import logging
import sys

import click

from sharedstream.ops.clitools import EXIT_USAGE


@click.command("run")
@click.argument("watchers", metavar="WATCHERS")
@click.option("--config", "config_path", metavar="PATH", type=click.Path(dir_okay=False),
              help="sharedstream.toml (default: $SHAREDSTREAM_CONFIG or ./sharedstream.toml).")
@click.option("--takeover", is_flag=True,
              help="Record this process's watcher set for its groups even if it differs.")
@click.option("--upgrade", is_flag=True, help="Migrate an older database schema first.")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
def run(watchers: str, config_path: str | None, takeover: bool, upgrade: bool,
        log_level: str) -> None:
    """Run the triggerer on WATCHERS (a Python file or module path)."""
    from sharedstream.triggerer.config import ConfigError, load_config
    from sharedstream.triggerer.plan import StartupError
    from sharedstream.triggerer.process import RunOptions, run_triggerer

    logging.basicConfig(level=log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = load_config(config_path)
        code = run_triggerer(config, watchers, RunOptions(takeover=takeover, upgrade=upgrade))
    except (ConfigError, StartupError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    sys.exit(code)

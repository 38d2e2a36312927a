"""Helpers every ``sharedstream`` command module shares: exit codes, JSON, common options.

Exit codes are a contract (docs/operations.md): 0 ok, 1 runtime failure, 2 usage or
configuration error. :func:`handled` is the one place that maps exceptions to
them, so every command reports a failure the same way: one ``error: ...`` line
on stderr, never a traceback and never a secret (database URLs and connection
configs may hold passwords, so neither is ever echoed).

Nothing here imports Kafka: the state-store commands use this module too, and
``statestore/`` stays free of Kafka.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, cast

import click
from click.formatting import join_options

from sharedstream.ops.exitcodes import EXIT_FAILURE as EXIT_FAILURE
from sharedstream.ops.exitcodes import EXIT_USAGE as EXIT_USAGE
from sharedstream.statestore.durations import stamp as stamp

if TYPE_CHECKING:
    from rich.console import Console

    from sharedstream.statestore.store import StateStore
    from sharedstream.triggerer.config import Config

P = ParamSpec("P")
R = TypeVar("R")

DEFAULT_KAFKA_CONNECTION = "kafka_default"


@functools.cache
def _console() -> Console:
    from rich.console import Console

    # Piped or redirected output is read by scripts and wide logs: no 80-column wrapping.
    return Console(width=None if sys.stdout.isatty() else 200, soft_wrap=True)


class _FirstUse:
    """The console, made when a command first prints through it: importing rich costs a
    command that prints one line or JSON more than its work does (issue 43)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(_console(), name)


console = cast("Console", _FirstUse())


class CommandError(Exception):
    """A runtime failure a command explains in one line (exit 1): a broker that does not
    answer, a group or topic that does not exist, a refused operation."""


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, default=_json_default, indent=2, sort_keys=True))


def json_line(data: Any) -> str:
    """``data`` as one line of JSON, timestamps as ``stamp`` prints them (``--json``
    of a command that streams, one object per line)."""
    return json.dumps(data, default=_json_default, ensure_ascii=False)


def _json_default(value: object) -> object:
    if isinstance(value, datetime):
        return stamp(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def fail(message: str, code: int) -> click.exceptions.Exit:
    """Print ``error: message`` on stderr; the caller raises the returned exit."""
    click.echo(f"error: {message}", err=True)
    return click.exceptions.Exit(code)


def option_value(option: str, parse: Callable[[str], R], text: str) -> R:
    """``parse(text)`` of ``option`` (a time, a duration), or one ``error: OPTION: why``
    line and exit 2: the parsers' ValueErrors say what to type instead."""
    try:
        return parse(text)
    except ValueError as exc:
        raise fail(f"{option}: {exc}", EXIT_USAGE) from None


def handled(fn: Callable[P, R]) -> Callable[P, R]:
    """Map failures to exit codes; never print the database URL (it may hold a password)."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except (click.ClickException, click.exceptions.Exit):
            raise
        except Exception as exc:
            mapped = _exit_for(exc)
            if mapped is None:
                raise
            raise mapped from None

    return wrapper


def _exit_for(exc: Exception) -> click.exceptions.Exit | None:
    """The one-line exit of a failure a command explains, None for a bug (its traceback).

    The exception types come from the modules that raise them, loaded by then: a command
    imports only what it uses (a ``dlq`` command loads no SQLAlchemy), and a type whose
    module is not loaded cannot be what was raised."""
    usage = _loaded_types(("sharedstream.triggerer.config", "ConfigError"),
                          ("sqlalchemy.exc", "ArgumentError"),
                          ("sharedstream.kafka.connections", "ConnectionConfigError"),
                          ("sharedstream.statestore.engine", "DatabaseURLError"),
                          ("sharedstream.statestore.migrate", "SchemaRevisionError"))
    if isinstance(exc, usage):
        return fail(str(exc), EXIT_USAGE)
    database = _loaded_types(("sqlalchemy.exc", "SQLAlchemyError"))
    if isinstance(exc, database):
        from sharedstream.statestore.engine import describe_error

        return fail(f"database: {describe_error(exc)}", EXIT_FAILURE)
    if isinstance(exc, ModuleNotFoundError):
        from sharedstream.triggerer.extras import missing_module

        return fail(missing_module(exc), EXIT_USAGE)
    if isinstance(exc, CommandError | LookupError | ValueError | TypeError
                  | NotImplementedError | OSError):
        return fail(str(exc), EXIT_FAILURE)
    return None


def _loaded_types(*where: tuple[str, str]) -> tuple[type[BaseException], ...]:
    """The exception classes ``(module, name)`` of the modules already imported."""
    found = []
    for module, name in where:
        loaded = sys.modules.get(module)
        if loaded is not None:
            found.append(getattr(loaded, name))
    return tuple(found)


def _options(ctx: click.Context) -> dict[str, Any]:
    """Every parameter given on the command line, whichever group level took it."""
    return ctx.find_root().params | (ctx.parent.params if ctx.parent else {}) | ctx.params


def database_options(fn: Callable[P, R]) -> Callable[P, R]:
    """``--config PATH`` and ``--database-url URL``, read by :func:`open_store`."""
    fn = click.option("--database-url", "database_url", metavar="URL",
                      help="SQLAlchemy URL; overrides [database] url.")(fn)
    fn = click.option("--config", "config", metavar="PATH", type=click.Path(dir_okay=False),
                      help="sharedstream.toml to read.")(fn)
    return fn


class RenamedOption(click.Option):
    """An option whose first name is its name and whose other names are old spellings,
    still accepted but left out of ``--help`` (renamed options keep scripts working)."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        record = super().get_help_record(ctx)
        if record is None:
            return None
        names, text = record
        # click lists short names first ("-n, --limit, --lines N"): cut every listed name,
        # keep what follows them (the metavar).
        listed = join_options(self.opts)[0]
        return self.opts[0] + names[len(listed):], text


def store_command(*, json_help: str = "Print JSON.") -> Callable[[Callable[..., R]],
                                                                Callable[..., R]]:
    """The decorators every database command shares, in one place.

    ``--config``, ``--database-url`` (read by :func:`open_store`) and ``--json``; the
    command gets the click context first and its failures become one ``error:`` line.
    """
    def decorate(fn: Callable[..., R]) -> Callable[..., R]:
        command = click.pass_context(handled(fn))
        command = click.option("--json", "as_json", is_flag=True, help=json_help)(command)
        return database_options(command)

    return decorate


def command_config(ctx: click.Context) -> Config:
    """The configuration the command's ``--config`` names (or the default one)."""
    from sharedstream.triggerer.config import load_config

    return load_config(_options(ctx).get("config"))


def open_store(ctx: click.Context, *, schema: bool = True) -> StateStore:
    """The state store the command's options name, closed when the command ends.

    It reads no destination or Airflow section, so it needs none of their secrets.
    With ``schema`` (every command but ``db``), the database must exist and carry this
    version's schema: anything else is one error saying to run ``sharedstream db upgrade``
    (and a mistyped SQLite path is never created as an empty file).
    """
    from sqlalchemy.engine import make_url

    from sharedstream.statestore.migrate import head_revision
    from sharedstream.statestore.store import StateStore
    from sharedstream.triggerer.config import load_config

    options = _options(ctx)
    config = load_config(options.get("config"), secrets=False)  # the store's sections only
    store = StateStore.from_url(options.get("database_url") or config.database.url,
                                config.state_store, must_exist=schema)
    ctx.call_on_close(store.close)
    if schema:
        current, head = store.revision(), head_revision()
        where = make_url(str(store.engine.url)).render_as_string(hide_password=True)
        if current is None:
            raise CommandError(f"{where} has no sharedstream schema: run "
                               "`sharedstream db upgrade` (with the same --config or "
                               "--database-url)")
        if current != head:
            raise CommandError(f"{where} is at schema revision {current}, this version needs "
                               f"{head}: run `sharedstream db upgrade`")
    return store


def kafka_connection_option(fn: Callable[P, R]) -> Callable[P, R]:
    """``--connection ID``, read by :func:`kafka_connection`."""
    return click.option(
        "--connection", "connection", metavar="ID", default=DEFAULT_KAFKA_CONNECTION,
        show_default=True,
        help="Kafka connection: [connections.<ID>] in the config file, or the "
             "SHAREDSTREAM_CONN_<ID> environment variable (JSON).")(fn)


def kafka_connection(ctx: click.Context) -> Mapping[str, Any]:
    """The validated librdkafka config of ``--connection`` (never printed: it may hold
    SASL passwords)."""
    from sharedstream.kafka.connections import resolve_connection

    options = _options(ctx)
    config = command_config(ctx)
    return resolve_connection(options["connection"], config.connections)

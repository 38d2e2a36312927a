"""The checks before the first message, and the openings they guard.

``run`` (through :mod:`sharedstream.triggerer.embedded`), ``check``, ``deliver`` and
the embedded ``Triggerer`` share these, so each refuses the same things with the same
``error:`` line: a :class:`StartupError` (exit 2) for what cannot work, an
:class:`UnavailableError` (exit 1) for a broker or database that does not answer.

Start-up order, and why:

1. Config and watcher module (the :mod:`plan`), then the health port, bound and
   released (``check`` only looks: it binds nothing): no network yet, errors exit 2.
2. Every topic and dead-letter topic must exist (one error naming all missing),
   checked before the database is written, so a refused start changes nothing. A
   topic missing from the first metadata answer is asked for again until
   ``broker_timeout``: a cluster restarting with the triggerer is not yet complete.
3. Database: an empty one is migrated; an older revision is refused unless
   ``--upgrade`` (a rolling deploy must not migrate under a running older process).
4. Group watcher sets recorded (refused on a different set unless ``--takeover``),
   then assets (de)activated.
5. Units of work, manager, health server, then one task per watcher
   (:mod:`sharedstream.triggerer.process`).

:func:`check_startup` is ``check``: steps 1 to 4 without writing anything.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from sharedstream.core.names import summarise
from sharedstream.delivery.service import DeliveryService
from sharedstream.kafka.connections import ConnectionConfigError
from sharedstream.kafka.topics import BrokerUnreachableError, missing_topics
from sharedstream.serde import configure_schema_registries
from sharedstream.statestore import StateStore
from sharedstream.statestore.engine import DatabaseURLError, describe_error
from sharedstream.statestore.migrate import head_revision, is_known_revision
from sharedstream.triggerer.config import Config, ProcessSettings
from sharedstream.triggerer.extras import missing_module
from sharedstream.triggerer.group_starts import start_report
from sharedstream.triggerer.health import check_port, probe_port
from sharedstream.triggerer.plan import GroupPlan, StartupError, UnavailableError, make_plan
from sharedstream.triggerer.registration import CohortMismatchError, register_groups
from sharedstream.triggerer.replay_topics import replay_topics

log = logging.getLogger(__name__)


def schema_problem(current: str | None, *, upgrade: bool) -> str | None:
    """Why the process cannot use a database at schema revision ``current`` (None: empty,
    which start-up migrates), or None."""
    head = head_revision()
    if current is None or current == head:
        return None
    if not is_known_revision(current):
        return (f"the database is at schema revision {current}, unknown to this version "
                f"(which needs {head}): it was migrated by a newer sharedstream; run that "
                "version, or restore a database at a known revision")
    if not upgrade:
        return (f"the database is at schema revision {current}, this version needs {head}: "
                "run `sharedstream db upgrade` or start with --upgrade")
    return None


def open_store(config: Config, *, upgrade: bool) -> StateStore:
    """The state store on ``[database] url``, migrated if empty, refused if behind."""
    store = StateStore.from_url(config.database.url, config.state_store)
    try:
        current = store.revision()
        problem = schema_problem(current, upgrade=upgrade)
        if problem is not None:
            raise StartupError(problem)
        if current is None:
            log.info("empty database: creating the schema (revision %s)", head_revision())
            store.upgrade()
        elif current != head_revision():
            log.info("upgrading the database schema %s -> %s", current, head_revision())
            store.upgrade()
    except BaseException:
        store.close()
        raise
    return store


def connect(config: Config, *, upgrade: bool) -> StateStore:
    """:func:`open_store`, its failures as the CLI's two kinds: a URL that cannot work is
    a StartupError (exit 2), a database that does not answer an UnavailableError (exit 1)."""
    try:
        return open_store(config, upgrade=upgrade)
    except DatabaseURLError as exc:
        raise StartupError(str(exc)) from None
    except SQLAlchemyError as exc:
        where = make_url(config.database.url).render_as_string(hide_password=True)
        raise UnavailableError(f"database {where} not reachable: {describe_error(exc)}"
                               ) from None


def check_topics(groups: Sequence[GroupPlan], timeout: float = 15.0) -> None:
    """Refuse to start while any watched or dead-letter topic is missing.

    One metadata probe per connection, so ``timeout`` (``[triggerer] broker_timeout``)
    bounds each connection once, not once per group: a topic missing from the first
    answer is asked for again until then (see :func:`missing_topics`)."""
    by_connection: dict[str, tuple[dict[str, Any], set[str]]] = {}
    for group in groups:
        if group.connection_id is not None:
            by_connection.setdefault(group.connection_id, (group.connection, set()))[1].update(
                group.topics)
    missing: list[str] = []
    for connection_id, (connection, topics) in by_connection.items():
        try:
            missing += missing_topics(connection_id, connection, topics, timeout)
        except ConnectionConfigError as exc:
            raise StartupError(str(exc)) from None
        except BrokerUnreachableError as exc:
            raise UnavailableError(str(exc)) from None
    if missing:
        raise StartupError(f"missing topics: {', '.join(sorted(set(missing)))} (still "
                           f"missing after [triggerer] broker_timeout, {timeout:g}s: create "
                           "them first; sharedstream never auto-creates topics)")


def health_check(process: ProcessSettings, *, bind: bool = True) -> list[str]:
    """The health server's address, bound and released: a port in use is refused here,
    before anything is written, not by a traceback once the process runs. ``bind=False``
    (``check``) only looks: ``check`` beside a running triggerer must not fail on the
    port that triggerer serves on."""
    if process.health_port < 0:
        return ["health server: off (health_port = -1)"]
    look = check_port if bind else probe_port
    return [look(process.health_host, process.health_port)]


def check_startup(config: Config, targets: Sequence[str], *, takeover: bool = False,
                  every_watcher: bool = False) -> list[str]:
    """Everything ``run`` checks before it reads a message, changing nothing: what was
    found, as lines. Problems raise as they do for ``run`` (StartupError, exit 2;
    UnavailableError, exit 1). A group's watchers are summarised (a group may have
    10,000), all of them named with ``every_watcher`` (``check --all-watchers``)."""
    plan = make_plan(config, targets)
    found = [f"watchers: {len(plan.watchers)} in {plan.source}"]
    found += [f"group {g.consumer_group}: " + (
        ", ".join(sorted(g.watchers)) if every_watcher else
        summarise(g.watchers, where="`sharedstream check --all-watchers` lists them all"))
        for g in plan.groups]
    found += health_check(config.process, bind=False)
    check_topics(plan.groups, config.process.broker_timeout)
    found.append("topics: all present")
    found += replay_topics(plan.groups, create=False, timeout=config.process.broker_timeout)
    url = make_url(config.database.url)
    where = url.render_as_string(hide_password=True)
    if url.get_backend_name() == "sqlite" and url.database and not Path(url.database).exists():
        found.append(f"database {where}: no file yet (run creates it)")
        return found + start_report(plan.groups, None, config.process.broker_timeout).lines()
    try:
        store = StateStore.from_url(config.database.url, config.state_store)
    except DatabaseURLError as exc:
        raise StartupError(str(exc)) from None
    try:
        try:
            current = store.revision()
        except SQLAlchemyError as exc:
            raise UnavailableError(f"database {where} not reachable: {describe_error(exc)}"
                                   ) from None
        problem = schema_problem(current, upgrade=False)
        if problem is not None:
            raise StartupError(problem)
        if current is None:
            found.append(f"database {where}: empty (run creates the schema)")
        found += start_report(plan.groups, None if current is None else store,
                              config.process.broker_timeout).lines()
        if current is not None:
            found.append(f"database {where}: schema {current}")
            try:
                register_groups(store, [g.declaration() for g in plan.groups],
                                takeover=takeover, dry_run=True)
            except CohortMismatchError as exc:
                raise StartupError(str(exc)) from None
        if config.destinations:
            service = delivery_service(store, config)
            asyncio.run(service.close())
            found.append(f"destinations: {', '.join(sorted(config.destinations))}")
    finally:
        store.close()
    return found


def delivery_service(store: StateStore, config: Config) -> DeliveryService:
    """The configured destinations' service; what keeps one from starting, a StartupError."""
    configure_schema_registries(config.schema_registries)  # the Kafka destination's formats
    try:
        return DeliveryService.from_config(store.engine, config.destinations, config.airflow,
                                           config.connections)
    except (ValueError, ConnectionConfigError) as exc:
        raise StartupError(str(exc)) from None
    except ModuleNotFoundError as exc:
        raise StartupError(f"destinations: {missing_module(exc)}") from None

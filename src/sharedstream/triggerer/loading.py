"""Loading a watcher module: every Asset it declares, checked before anything runs.

The triggerer imports the user's module once at start-up. Everything that can be
checked without a broker or a database is checked here, so a mistake fails the
start with one clear line (exit code 2) instead of half a process running:
a missing file, a syntax error (file and line), an import that raises or exits
(``sys.exit()``, ``KeyboardInterrupt``: anything but the SIGTERM that stops a process
still starting), no assets, an asset without watchers, a watcher name used twice, a
trigger whose ``serialize()`` does not rebuild an equal trigger, a shared-stream filter
that is not an async generator function, two watchers of one shared-stream group that
disagree on the group's arguments, and dead letters that would come back as input.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
import traceback
from collections.abc import Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from sharedstream.triggerer.signals import StoppedWhileStarting
from sharedstream.triggers.assets import Asset, AssetWatcher
from sharedstream.triggers.base import (
    BaseEventTrigger,
    SharedStreamConflictError,
    check_shared_stream_group,
)
from sharedstream.triggers.kafka import KafkaSharedStreamTrigger


class WatcherLoadError(ValueError):
    """The watcher module cannot be used; the message names the file or the watcher."""


@dataclass(frozen=True, slots=True)
class LoadedWatcher:
    """One declared watcher with the asset it feeds."""

    asset: Asset
    watcher: AssetWatcher

    @property
    def name(self) -> str:
        return self.watcher.name

    @property
    def trigger(self) -> BaseEventTrigger:
        return self.watcher.trigger


@dataclass(frozen=True, slots=True)
class WatcherModule:
    """What a watcher module declares, in declaration order."""

    source: str
    assets: tuple[Asset, ...]

    def watchers(self) -> Iterator[LoadedWatcher]:
        for asset in self.assets:
            for watcher in asset.watchers:
                yield LoadedWatcher(asset, watcher)


def load_watcher_module(target: str) -> WatcherModule:
    """Import ``target`` (a ``.py`` file or a dotted module path) and collect its assets."""
    return load_watchers([target])


def load_watchers(targets: Sequence[str]) -> WatcherModule:
    """Import every target and collect their assets, checked together.

    A target is a ``.py`` file, a dotted module path, or a folder: every ``.py`` file
    below it (sorted, recursively, skipping names that start with ``_`` or ``.``), the
    way Airflow reads a DAGs folder. Watcher names must be unique across all of them.
    """
    files = [file for target in targets for file in _expand(target)]
    for target in targets:
        # As Airflow puts its DAGs folder on sys.path: a watcher module's helpers (an
        # apply_function's "module.function") import by their plain names.
        folder = Path(target) if Path(target).is_dir() else Path(target).parent
        if target.endswith(".py") or Path(target).is_dir():
            _on_path(folder)
    source = ", ".join(targets)
    seen: set[int] = set()
    assets: list[Asset] = []
    for file in files:
        found = [a for a in _collect_assets(_import(file)) if id(a) not in seen]
        if not found and file in targets:
            raise WatcherLoadError(
                f"{file}: no Asset found at module level (or in module-level lists/dicts)")
        seen.update(id(a) for a in found)
        assets += found
    if not assets:
        raise WatcherLoadError(f"{source}: no Asset found in any watcher module")
    return check_assets(source, assets)


def check_assets(source: str, assets: Sequence[Asset]) -> WatcherModule:
    """``assets`` checked as a watcher module's are; ``source`` names them in errors.

    The embedded API (:class:`sharedstream.triggerer.Triggerer`) passes assets built in code, so
    they get the same start-up checks as a module ``sharedstream run`` imports."""
    strays = [a for a in assets if not isinstance(a, Asset)]
    if strays:
        raise WatcherLoadError(f"{source}: expected Asset objects, got "
                               f"{type(strays[0]).__qualname__}")
    if not assets:
        raise WatcherLoadError(f"{source}: no Asset given")
    found = tuple({id(a): a for a in assets}.values())  # one object listed twice: once
    _check(source, found)
    _check_groups(source, found)
    _check_dead_letter_loops(source, found)
    return WatcherModule(source=source, assets=found)


def _on_path(folder: Path) -> None:
    entry = str(folder.resolve())
    if entry not in sys.path:
        sys.path.insert(0, entry)


def _expand(target: str) -> list[str]:
    path = Path(target)
    if not path.is_dir():
        return [target]
    files = sorted(str(f) for f in path.rglob("*.py")
                   if not any(part.startswith(("_", ".")) for part in f.relative_to(path).parts))
    if not files:
        raise WatcherLoadError(f"{target}: a folder without watcher modules (*.py)")
    return files


def _import(target: str) -> ModuleType:
    path = Path(target)
    looks_like_file = target.endswith(".py") or "/" in target or path.exists()
    try:
        if looks_like_file:
            if not path.is_file():
                raise WatcherLoadError(f"watcher module not found: {target}")
            name = f"sharedstream_watchers_{abs(hash(str(path.resolve())))}"
            spec = importlib.util.spec_from_file_location(name, path)
            if spec is None or spec.loader is None:
                raise WatcherLoadError(f"{target}: not a loadable Python file")
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules[name]
                raise
            return module
        return importlib.import_module(target)
    except WatcherLoadError:
        raise
    except SyntaxError as exc:
        raise WatcherLoadError(
            f"{exc.filename or target}:{exc.lineno}: syntax error: {exc.msg}") from None
    except ModuleNotFoundError as exc:
        if exc.name is not None and target.split(".")[0] == exc.name.split(".")[0]:
            raise WatcherLoadError(f"watcher module not found: {target}") from None
        raise WatcherLoadError(f"{target}: import failed: {exc}") from None
    except StoppedWhileStarting:
        raise
    except SystemExit as exc:
        raise WatcherLoadError(
            f"{target}: the import called sys.exit({exc.code!r}){_where(exc)}: a watcher "
            "module must not exit; keep that code under `if __name__ == \"__main__\":`"
        ) from None
    except KeyboardInterrupt as exc:
        raise WatcherLoadError(f"{target}: the import was interrupted{_where(exc)} "
                               "(KeyboardInterrupt: a Ctrl-C, or the module raising it)"
                               ) from None
    except BaseException as exc:  # one error line, whatever the module raised
        raise WatcherLoadError(f"{target}: import failed{_where(exc)}: "
                               f"{type(exc).__name__}: {exc}") from None


def _where(exc: BaseException) -> str:
    """`` at file:line`` of the failing import: its innermost frame in a file outside
    sharedstream (the user's line that declared something sharedstream refused; code
    generated at run time, a dataclass's ``__init__``, has no file), else the innermost."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ""
    ours = str(Path(__file__).resolve().parents[1])
    theirs = [f for f in frames if not f.filename.startswith("<")
              and not str(Path(f.filename).resolve()).startswith(ours)]
    last = (theirs or frames)[-1]
    return f" at {last.filename}:{last.lineno}"


def _collect_assets(module: ModuleType) -> Iterator[Asset]:
    seen: set[int] = set()
    for value in vars(module).values():
        for candidate in _candidates(value):
            if isinstance(candidate, Asset) and id(candidate) not in seen:
                seen.add(id(candidate))
                yield candidate


def _candidates(value: object) -> Iterable[object]:
    if isinstance(value, list | tuple | set | frozenset):
        return value
    if isinstance(value, dict):
        return value.values()
    return (value,)


def _check(target: str, assets: tuple[Asset, ...]) -> None:
    by_asset_name: dict[str, Asset] = {}
    owner_of: dict[str, str] = {}
    for asset in assets:
        if asset.name in by_asset_name:
            raise WatcherLoadError(f"{target}: two different assets are named {asset.name!r}")
        by_asset_name[asset.name] = asset
        if not asset.watchers:
            raise WatcherLoadError(f"{target}: asset {asset.name!r} has no watchers")
        for watcher in asset.watchers:
            if watcher.name in owner_of:
                raise WatcherLoadError(
                    f"{target}: watcher name {watcher.name!r} is used by asset "
                    f"{owner_of[watcher.name]!r} and asset {asset.name!r}; watcher names "
                    "must be unique")
            owner_of[watcher.name] = asset.name
            _check_serializable(target, watcher)
            _check_filter(target, watcher)


def _check_serializable(target: str, watcher: AssetWatcher) -> None:
    """``serialize()`` must rebuild an equal trigger: it is how groups compare arguments."""
    trigger = watcher.trigger
    what = f"{target}: watcher {watcher.name!r}: trigger {type(trigger).__qualname__}"
    try:
        classpath, kwargs = trigger.serialize()
        module_name, _, qualname = classpath.rpartition(".")
        cls = getattr(sys.modules.get(module_name) or importlib.import_module(module_name),
                      qualname)
        rebuilt = cls(**kwargs)
        if rebuilt.serialize() != (classpath, kwargs):
            raise ValueError("serialize() of the rebuilt trigger differs")
    except Exception as exc:
        raise WatcherLoadError(f"{what} is not serialisable: {type(exc).__name__}: {exc}") \
            from None


def _check_filter(target: str, watcher: AssetWatcher) -> None:
    """A shared-stream filter must be an async generator function: the manager iterates
    it with ``async for``. Anything else fails at its first message and is restarted for
    ever (a traceback each time, nothing committed), so it is refused here."""
    trigger = watcher.trigger
    if trigger.shared_stream_key() is None:
        return
    batch = getattr(trigger, "filter_shared_batch", None)
    if batch is not None:  # a batch watcher: the manager awaits one call per batch
        if inspect.iscoroutinefunction(batch):
            return
        raise WatcherLoadError(
            f"{target}: watcher {watcher.name!r}: {type(trigger).__qualname__}"
            ".filter_shared_batch is not a coroutine function: write it as `async def "
            "filter_shared_batch(self, batch)` without `yield`, saying what each message "
            "produces with batch.emit(message, event) or batch.reject(message, reason)")
    method = trigger.filter_shared_stream
    if inspect.isasyncgenfunction(method):
        return
    if inspect.iscoroutinefunction(method):
        shape = "a coroutine function (async def without yield)"
    elif inspect.isgeneratorfunction(method):
        shape = "a plain generator function (def with yield)"
    else:
        shape = "a plain function" if callable(method) else "not callable"
    raise WatcherLoadError(
        f"{target}: watcher {watcher.name!r}: {type(trigger).__qualname__}.filter_shared_stream "
        f"is {shape}, not an async generator function: write it as `async def` iterating "
        "the stream with `async for` and containing a `yield` (a filter that never yields "
        "an event still needs one, e.g. `return` then `yield` after its loop)")


def _check_groups(target: str, assets: tuple[Asset, ...]) -> None:
    """Every shared-stream group's watchers agree on ``shared_stream_arguments()``.

    Checked here, before any group starts, so a conflict is a start-up error rather
    than the second watcher of a running group failing to subscribe.
    """
    groups: dict[Hashable, list[tuple[str, BaseEventTrigger]]] = {}
    for asset in assets:
        for watcher in asset.watchers:
            key = watcher.trigger.shared_stream_key()
            if key is not None:
                groups.setdefault(key, []).append((watcher.name, watcher.trigger))
    for members in groups.values():
        try:
            check_shared_stream_group(members)
        except SharedStreamConflictError as exc:
            raise WatcherLoadError(f"{target}: {exc}") from None



Topic = tuple[str, str]  # (kafka_config_id, topic name): another connection, another cluster


def _check_dead_letter_loops(target: str, assets: tuple[Asset, ...]) -> None:
    """Refuse a ``dlq_topic`` whose dead letters this process would read again.

    A group's rejected messages go to its ``dlq_topic``; a group that watches that topic
    (the same group, or another on the same connection) is handed them as new messages.
    When that chain comes back to a topic it started from, a message rejected once is
    read and rejected again for ever. Reading another group's dead letters is allowed
    when the chain ends (a watcher that archives them, or alerts on them): only cycles
    are refused.
    """
    # Each watched topic -> the dead-letter topics its rejects go to, and by which watcher.
    sends: dict[Topic, dict[Topic, str]] = {}
    for asset in assets:
        for watcher in asset.watchers:
            trigger = watcher.trigger
            if isinstance(trigger, KafkaSharedStreamTrigger) and trigger.dlq_topic is not None:
                for topic in trigger.topics:
                    sends.setdefault((trigger.kafka_config_id, topic), {}).setdefault(
                        (trigger.kafka_config_id, trigger.dlq_topic), watcher.name)
    done: set[Topic] = set()
    for start in sends:
        loop = _loop_from(start, sends, [], done)
        if loop is not None:
            raise WatcherLoadError(f"{target}: {_describe_loop(loop)}: set dlq_topic to a "
                                   "topic no watcher of this process reads")


def _loop_from(topic: Topic, sends: dict[Topic, dict[Topic, str]],
               path: list[tuple[str, Topic, Topic]], done: set[Topic]
               ) -> list[tuple[str, Topic, Topic]] | None:
    """A cycle of (watcher, topic, its dlq) reachable from ``topic``, or None (depth
    first; ``path`` is the chain that led here, ``done`` the topics already cleared)."""
    for dlq, watcher in sends.get(topic, {}).items():
        path.append((watcher, topic, dlq))
        starts = [i for i, (_, read, _) in enumerate(path) if read == dlq]
        if starts:
            return path[starts[0]:]
        if dlq not in done:
            loop = _loop_from(dlq, sends, path, done)
            if loop is not None:
                return loop
        path.pop()
    done.add(topic)
    return None


def _describe_loop(loop: list[tuple[str, Topic, Topic]]) -> str:
    if len(loop) == 1:
        watcher, (_, topic), _ = loop[0]
        return (f"watcher {watcher!r}: dlq_topic {topic!r} is a topic it watches, so its "
                "dead letters would come back to it as new messages, for ever")
    steps = "; ".join(f"watcher {watcher!r} reads {topic!r}, its dlq_topic is {dlq!r}"
                      for watcher, (_, topic), (_, dlq) in loop)
    return f"dead letters would go round for ever: {steps}"

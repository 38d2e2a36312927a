"""The standard ``OTEL_*`` variables, checked before the OpenTelemetry SDK reads them.

Why: the SDK meets a bad value in one of three ways, none of them one clear line. It
raises (``OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT=-5``: a traceback of 30 lines out of
``sharedstream run``), it logs a warning and goes on with its default
(``OTEL_TRACES_SAMPLER_ARG=abc`` samples every trace, ``OTEL_EXPORTER_OTLP_TIMEOUT=x``
waits 10 s), or it logs the bad part itself: a malformed
``OTEL_EXPORTER_OTLP_HEADERS`` entry, token and all. So when tracing is on, each
variable below that is set is checked first, and the first bad one is a
:class:`~sharedstream.tracing.export.TracingConfigError` naming it and what it
takes (``check`` and ``run`` print it as one ``error:`` line, exit 2).

Never shown: any part of a headers variable (a header is where a token goes), or of
an endpoint (it may carry a password or a key in its query). Other values are shown,
cut to 40 characters. Variables sharedstream does not know are the SDK's to read.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping
from importlib.metadata import entry_points
from urllib.parse import unquote, urlsplit

from sharedstream.tracing.export import TracingConfigError

SAMPLERS = ("always_on", "always_off", "traceidratio", "parentbased_always_on",
            "parentbased_always_off", "parentbased_traceidratio")
_SAMPLER_GROUP = "opentelemetry_traces_sampler"  # samplers a package adds by entry point
# A header entry as the SDK takes it (RFC 7230 token, "=", printable ASCII or space).
_HEADER = re.compile(r"[ \t]*[!#-'*+.0-9A-Z^-z|~-]+[ \t]*=[ \t]*[ !#-+\--:<-\[\]-~]*[ \t]*")
_OTLP = "OTEL_EXPORTER_OTLP_"


def check_environment(environ: Mapping[str, str], exporter: str) -> None:
    """Raise TracingConfigError for the first ``OTEL_*`` variable with a value the SDK
    cannot use (``exporter``: the one ``OTEL_TRACES_EXPORTER`` chose)."""
    _sampler(environ)
    for name in _COUNTS:
        _number(environ, name, integer=True, least=0)
    _number(environ, "OTEL_BSP_MAX_QUEUE_SIZE", integer=True, least=1)
    _number(environ, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", integer=True, least=1)
    queue = environ.get("OTEL_BSP_MAX_QUEUE_SIZE", "").strip()
    batch = environ.get("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "").strip()
    if int(batch or 512) > int(queue or 2048):
        raise TracingConfigError(
            f"OTEL_BSP_MAX_EXPORT_BATCH_SIZE={batch or 512} is above OTEL_BSP_MAX_QUEUE_SIZE="
            f"{queue or 2048}: a batch is taken from the queue; lower it or raise the queue")
    _pairs(environ, "OTEL_RESOURCE_ATTRIBUTES", "key=value")
    _choice(environ, "OTEL_SDK_DISABLED", ("true", "false"))
    if exporter != "otlp":
        return
    for prefix in (_OTLP, _OTLP + "TRACES_"):
        _number(environ, prefix + "TIMEOUT", integer=False, least=0)
        _choice(environ, prefix + "COMPRESSION", ("gzip", "deflate", "none"))
        _endpoint(environ, prefix + "ENDPOINT")
        _pairs(environ, prefix + "HEADERS", "header")
        for key in ("CERTIFICATE", "CLIENT_KEY", "CLIENT_CERTIFICATE"):
            _file(environ, prefix + key)


_COUNTS = ("OTEL_BSP_SCHEDULE_DELAY", "OTEL_BSP_EXPORT_TIMEOUT",
           *(f"OTEL_{what}_LIMIT" for what in (
               "ATTRIBUTE_COUNT", "ATTRIBUTE_VALUE_LENGTH", "SPAN_ATTRIBUTE_COUNT",
               "SPAN_ATTRIBUTE_VALUE_LENGTH", "SPAN_EVENT_COUNT", "SPAN_LINK_COUNT",
               "EVENT_ATTRIBUTE_COUNT", "LINK_ATTRIBUTE_COUNT")))


def _shown(value: str) -> str:
    return repr(value if len(value) <= 40 else value[:37] + "...")


def _set(environ: Mapping[str, str], name: str) -> str | None:
    value = environ.get(name)
    return None if value is None or not value.strip() else value.strip()


def _sampler(environ: Mapping[str, str]) -> None:
    name = (_set(environ, "OTEL_TRACES_SAMPLER") or "parentbased_always_on").lower()
    if name not in SAMPLERS and name not in {e.name for e in entry_points(group=_SAMPLER_GROUP)}:
        raise TracingConfigError(
            f"OTEL_TRACES_SAMPLER={_shown(name)} is not a sampler: set one of "
            f"{', '.join(SAMPLERS)}")
    arg = _set(environ, "OTEL_TRACES_SAMPLER_ARG")
    if name.endswith("traceidratio") and arg is not None:
        _number(environ, "OTEL_TRACES_SAMPLER_ARG", integer=False, least=0, most=1,
                what="the share of traces to sample, from 0 to 1 (0.25 for a quarter)")


def _number(environ: Mapping[str, str], name: str, *, integer: bool, least: float,
            most: float | None = None, what: str = "") -> None:
    value = _set(environ, name)
    if value is None:
        return
    parse: Callable[[str], float] = int if integer else float
    try:
        number = parse(value)
    except ValueError:
        number = math.nan
    if not (number >= least and (most is None or number <= most)):
        kind = "a whole number" if integer else "a number"
        bounds = f" from {least:g} to {most:g}" if most is not None else f", {least:g} or more"
        raise TracingConfigError(f"{name}={_shown(value)}: {what or kind + bounds} expected")


def _choice(environ: Mapping[str, str], name: str, choices: tuple[str, ...]) -> None:
    value = _set(environ, name)
    if value is not None and value.lower() not in choices:
        raise TracingConfigError(f"{name}={_shown(value)}: set one of {', '.join(choices)}")


def _endpoint(environ: Mapping[str, str], name: str) -> None:
    value = _set(environ, name)
    if value is None:
        return
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise TracingConfigError(
            f"{name} is not an http:// or https:// URL with a host (its value is not shown): "
            "give the collector's OTLP/HTTP address, such as http://otel-collector:4318")


def _pairs(environ: Mapping[str, str], name: str, kind: str) -> None:
    """A comma-separated list of ``name=value``; the error says which entry is wrong,
    never what it holds."""
    value = environ.get(name)
    if value is None:
        return
    entries = [e for e in re.split(r"[ \t]*,[ \t]*", value) if e.strip()]
    for number, entry in enumerate(entries, 1):
        if _HEADER.fullmatch(entry) is None or any(
                ord(c) < 32 for c in unquote(entry.partition("=")[2])):
            raise TracingConfigError(
                f"{name}: entry {number} of {len(entries)} is not a {kind} written name=value "
                "(its text is not shown: it may hold a secret); write name=value pairs "
                "separated by commas, each value URL-encoded (a space as %20)")


def _file(environ: Mapping[str, str], name: str) -> None:
    value = _set(environ, name)
    if value is not None and not os.path.isfile(value):
        raise TracingConfigError(f"{name}={_shown(value)}: no such file")


def hidden(text: str, environ: Mapping[str, str]) -> str:
    """``text`` (an SDK error) without the values of the variables never shown."""
    for name, value in environ.items():
        if name.startswith("OTEL_") and name.endswith(("HEADERS", "ENDPOINT")) and value:
            for part in sorted({value, *re.split(r"[,=]", value)}, key=len, reverse=True):
                if len(part.strip()) >= 4:
                    text = text.replace(part.strip(), "***")
    return text

"""Issue 41 §3.3 and §3.4: a bad value in a standard ``OTEL_*`` variable is one line.

Before, only sharedstream's own tracing settings (the exporter, the protocol) were
checked: the SDK raised on some values (a traceback of 30 lines out of ``run``), fell
back to a default with a warning on others (``OTEL_TRACES_SAMPLER_ARG=abc`` sampled
every trace), and logged a malformed ``OTEL_EXPORTER_OTLP_HEADERS`` entry, token
included. Now ``run`` and ``check`` refuse each with one ``error:`` line naming the
variable, exit 2, before anything connects; a header or an endpoint is never shown.
Each case is a fresh interpreter: the SDK reads ``os.environ`` and keeps what it built.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_lines import error_line, watcher_module

from sharedstream.tracing import checked_exporter
from sharedstream.tracing.otelenv import hidden

pytestmark = pytest.mark.unit

SECRET = "tok3n-never-shown"
OTLP = {"OTEL_TRACES_EXPORTER": "otlp"}

# (the environment beside OTEL_TRACES_EXPORTER=otlp, the start of the error line)
CASES: list[tuple[dict[str, str], str]] = [
    ({"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "abc"},
     "OTEL_TRACES_SAMPLER_ARG='abc': the share of traces to sample, from 0 to 1"),
    ({"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "1.5"},
     "OTEL_TRACES_SAMPLER_ARG='1.5': the share"),
    ({"OTEL_TRACES_SAMPLER": "bogus"}, "OTEL_TRACES_SAMPLER='bogus' is not a sampler: set one "
                                       "of always_on"),
    ({"OTEL_EXPORTER_OTLP_TIMEOUT": "x"}, "OTEL_EXPORTER_OTLP_TIMEOUT='x': a number, 0 or more"),
    ({"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "-1"}, "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT='-1'"),
    ({"OTEL_EXPORTER_OTLP_PROTOCOL": "bogus"}, "OTLP protocol 'bogus'"),
    ({"OTEL_EXPORTER_OTLP_HEADERS": f"authorization=Bearer%20{SECRET},{SECRET}"},
     "OTEL_EXPORTER_OTLP_HEADERS: entry 2 of 2 is not a header written name=value (its text "
     "is not shown"),
    ({"OTEL_EXPORTER_OTLP_TRACES_HEADERS": f"Authorization: Bearer {SECRET}"},
     "OTEL_EXPORTER_OTLP_TRACES_HEADERS: entry 1 of 1 is not a header"),
    ({"OTEL_EXPORTER_OTLP_HEADERS": f"x-key=a%0D%0A{SECRET}"},
     "OTEL_EXPORTER_OTLP_HEADERS: entry 1 of 1 is not a header"),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": f"collector:4318/?key={SECRET}"},
     "OTEL_EXPORTER_OTLP_ENDPOINT is not an http:// or https:// URL with a host"),
    ({"OTEL_EXPORTER_OTLP_COMPRESSION": "zip"},
     "OTEL_EXPORTER_OTLP_COMPRESSION='zip': set one of gzip, deflate, none"),
    ({"OTEL_EXPORTER_OTLP_CERTIFICATE": "/nonexistent/ca.pem"},
     "OTEL_EXPORTER_OTLP_CERTIFICATE='/nonexistent/ca.pem': no such file"),
    ({"OTEL_BSP_MAX_QUEUE_SIZE": "x"}, "OTEL_BSP_MAX_QUEUE_SIZE='x': a whole number, 1 or more"),
    ({"OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "4096"},
     "OTEL_BSP_MAX_EXPORT_BATCH_SIZE=4096 is above OTEL_BSP_MAX_QUEUE_SIZE=2048"),
    ({"OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT": "-5"}, "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT='-5'"),
    ({"OTEL_ATTRIBUTE_COUNT_LIMIT": "abc"}, "OTEL_ATTRIBUTE_COUNT_LIMIT='abc'"),
    ({"OTEL_RESOURCE_ATTRIBUTES": "team=a,broken"},
     "OTEL_RESOURCE_ATTRIBUTES: entry 2 of 2 is not a key=value"),
    ({"OTEL_SDK_DISABLED": "maybe"}, "OTEL_SDK_DISABLED='maybe': set one of true, false"),
]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A watcher module and a config whose broker and database nothing must touch."""
    watcher_module(tmp_path, "TextValue()", "TextValue")
    (tmp_path / "sharedstream.toml").write_text(
        f'[database]\nurl = "sqlite:///{tmp_path / "db.sqlite"}"\n'
        '[triggerer]\nbroker_timeout = 1.0\n'
        '[connections.kafka_default]\n"bootstrap.servers" = "127.0.0.1:9"\n')
    return tmp_path


@pytest.mark.parametrize(("environ", "start"), CASES, ids=[
    ",".join(f"{k}={v}" for k, v in env.items())[:60] for env, _ in CASES])
def test_run_refuses_a_bad_otel_setting_in_one_line_without_the_secret(
        project: Path, environ: dict[str, str], start: str) -> None:
    line = error_line(project, "run", "watchers.py", env={**OTLP, **environ})
    assert line.startswith(f"error: {start}"), line
    assert SECRET not in line and not (project / "db.sqlite").exists()


@pytest.mark.parametrize(("environ", "start"), [CASES[0], CASES[6], CASES[14]])
def test_check_refuses_it_as_run_would(project: Path, environ: dict[str, str], start: str
                                       ) -> None:
    line = error_line(project, "check", "watchers.py", env={**OTLP, **environ})
    assert line.startswith(f"error: {start}") and SECRET not in line, line


def test_good_settings_pass_and_the_console_exporter_reads_no_otlp_variable(
        tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text("")
    good = {**OTLP, "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
            "OTEL_TRACES_SAMPLER_ARG": "0.25", "OTEL_EXPORTER_OTLP_TIMEOUT": "2.5",
            "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer%20x, x-tenant = a b",
            "OTEL_EXPORTER_OTLP_ENDPOINT": "https://collector:4318",
            "OTEL_EXPORTER_OTLP_COMPRESSION": "GZIP",
            "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE": str(tmp_path / "ca.pem"),
            "OTEL_BSP_MAX_QUEUE_SIZE": "100", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "100",
            "OTEL_RESOURCE_ATTRIBUTES": "team=payments,region=eu%20west",
            "OTEL_SDK_DISABLED": "false", "OTEL_SPAN_EVENT_COUNT_LIMIT": "0"}
    assert checked_exporter(good) == "otlp"
    assert checked_exporter({"OTEL_TRACES_EXPORTER": "console",
                             "OTEL_EXPORTER_OTLP_HEADERS": SECRET}) == "console"
    assert checked_exporter({"OTEL_EXPORTER_OTLP_HEADERS": SECRET}) is None


def test_an_sdk_error_the_checks_did_not_foresee_is_printed_without_headers() -> None:
    environ = {"OTEL_EXPORTER_OTLP_HEADERS": f"authorization=Bearer {SECRET},x=1",
               "OTEL_EXPORTER_OTLP_ENDPOINT": f"https://collector/?key={SECRET}2"}
    text = hidden(f"bad 'Bearer {SECRET}' and https://collector/?key={SECRET}2", environ)
    assert SECRET not in text and text.startswith("bad '***"), text

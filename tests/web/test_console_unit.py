"""The console's parts that need no service: its security rules, the lag history, the
charts, the command's refusals. The app runs here in-process on an empty SQLite."""

from __future__ import annotations

import base64
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from sharedstream.core.install import pip_install
from sharedstream.statestore.store import StateStore
from sharedstream.web.app import create_app, host_name, token_matches
from sharedstream.web.charts import lag_chart, timeline
from sharedstream.web.command import web
from sharedstream.web.history import LagHistory
from sharedstream.web.pages import environment
from sharedstream.web.settings import TOKEN_ENV, ConsoleSettings, ConsoleSettingsError, is_loopback

pytestmark = pytest.mark.unit

TOKEN = "correct-horse-battery-staple"


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.0.0.2", True), ("::1", True), ("[::1]", True),
    ("localhost", True), ("LOCALHOST", True), ("0.0.0.0", False), ("::", False),
    ("10.0.0.5", False), ("example.com", False), ("", False)])
def test_what_counts_as_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_off_loopback_needs_a_token_of_some_length() -> None:
    with pytest.raises(ConsoleSettingsError,
                       match=r"refusing to serve on 0\.0\.0\.0 without a token"):
        ConsoleSettings(host="0.0.0.0")
    with pytest.raises(ConsoleSettingsError, match="at least 16 characters"):
        ConsoleSettings(host="0.0.0.0", token="short")
    assert ConsoleSettings(host="0.0.0.0", token=TOKEN).needs_token
    assert TOKEN not in repr(ConsoleSettings(token=TOKEN))


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.mark.parametrize(("header", "ok"), [
    (f"Bearer {TOKEN}", True), (f"bearer {TOKEN}", True), (basic("ops", TOKEN), True),
    (basic("", TOKEN), True), (basic(TOKEN, ""), False), (f"Bearer {TOKEN}x", False),
    ("Bearer", False), ("Basic !!!", False), (None, False), ("", False),
    (f"Token {TOKEN}", False)])
def test_the_token_as_bearer_or_basic_password(header: str | None, ok: bool) -> None:
    assert token_matches(header, TOKEN) is ok


@pytest.mark.parametrize(("header", "name"), [
    ("127.0.0.1:8795", "127.0.0.1"), ("localhost", "localhost"), ("[::1]:80", "::1"),
    ("example.com:443", "example.com")])
def test_host_names(header: str, name: str) -> None:
    assert host_name(header) == name


@pytest.fixture
def store() -> Iterator[StateStore]:
    found = StateStore.from_url("sqlite://")
    found.upgrade()
    yield found
    found.close()


def test_with_a_token_every_path_answers_401_without_it(store: StateStore) -> None:
    client = TestClient(create_app(ConsoleSettings(host="0.0.0.0", token=TOKEN), store,
                                   sampler=False))
    for path in ("/", "/api/v1/overview", "/api/v1/openapi.json", "/api/v1/docs",
                 "/static/console.js", "/assets", "/nowhere"):
        refused = client.get(path)
        assert refused.status_code == 401, path
        assert refused.headers["www-authenticate"].startswith("Basic realm=")
        assert refused.headers["cache-control"] == "no-store"
    assert client.get("/api/v1/overview").json() == {
        "detail": "authentication required: the console's token, as a bearer token or the "
                  "basic-auth password"}
    assert client.get("/", headers={"Authorization": basic("me", TOKEN)}).status_code == 200
    answer = client.get("/api/v1/overview", headers={"Authorization": f"Bearer {TOKEN}"})
    assert answer.status_code == 200 and answer.json()["counts"]["alive"] == 0
    schema = client.get("/api/v1/openapi.json",
                        headers={"Authorization": f"Bearer {TOKEN}"}).json()
    assert set(schema["components"]["securitySchemes"]) == {"bearer", "basic"}


def test_pages_carry_a_strict_content_security_policy(store: StateStore) -> None:
    client = TestClient(create_app(ConsoleSettings(trusted_hosts=("testserver",)), store,
                                   sampler=False))
    page = client.get("/")
    policy = page.headers["content-security-policy"]
    assert "script-src 'self';" in policy and "style-src 'self';" in policy
    assert "unsafe-inline" not in policy
    assert page.headers["x-frame-options"] == "DENY"
    assert page.headers["x-content-type-options"] == "nosniff"
    assert client.get("/static/console.js").status_code == 200


def test_templates_escape_every_value() -> None:
    env = environment()
    rendered = env.from_string("{{ v }} {{ v | compact }} {{ v | pretty }}").render(
        v={"x": "<script>alert(1)</script>"})
    assert "<script>" not in rendered and "&lt;script&gt;" in rendered


def test_the_lag_history_keeps_a_window_and_a_gap() -> None:
    history = LagHistory(window_s=60, min_gap_s=1.0)
    assert history.record(0.0, "g", {("t", 0): 5})
    assert not history.record(0.5, "g", {("t", 0): 6})  # too soon: one sample a second
    for second in range(1, 100):
        history.record(float(second), "g", {("t", 0): second, ("t", 1): 0})
    series = history.series("g", 99.0)
    assert series[("t", 0)][0] == (39.0, 39) and series[("t", 0)][-1] == (99.0, 99)
    assert len(series[("t", 1)]) == 61
    assert history.series("g", 1000.0) == {}  # all older than the window
    assert history.series("unknown", 0.0) == {}


def test_the_lag_chart_escapes_names_and_exposes_its_values() -> None:
    svg, lines = lag_chart({("<t>", 0): [(10.0, 3), (20.0, 7)], ("<t>", 1): [(20.0, 0)]},
                           now=20.0, window_s=3600)
    assert "<t>" not in svg and 'data-partition="&lt;t&gt;[0]" data-last="7"' in svg
    assert 'data-samples="3"' in svg
    assert [(line.label, line.last, line.peak) for line in lines] == [
        ("<t>[0]", 7, 7), ("<t>[1]", 0, 0)]
    empty, _ = lag_chart({}, now=0.0, window_s=3600)
    assert "no samples yet" in empty
    bars = timeline([0, 4, 1], ["<a", "b", "c", "d>"])
    assert 'data-total="5"' in bars and "<a" not in bars and "&lt;a" in bars


def run_web(args: list[str], env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(web, args, env=env, prog_name="sharedstream web")


def test_the_command_refuses_off_loopback_without_a_token(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    result = run_web(["--host", "0.0.0.0", "--database-url", f"sqlite:///{tmp_path / 'x.db'}"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"error: refusing to serve on 0.0.0.0 without a token: set {TOKEN_ENV} (or --token), "
        "or bind 127.0.0.1"]
    short = run_web(["--host", "0.0.0.0", "--token", "abc"])
    assert short.exit_code == 2 and "at least 16 characters" in short.output


def test_a_missing_extra_is_one_line_naming_it(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvicorn", None)  # "not installed"
    result = run_web(["--database-url", f"sqlite:///{tmp_path / 'x.db'}"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"error: the Python module 'uvicorn' is not installed: {pip_install('web')}"]


def test_a_database_without_the_schema_is_refused(tmp_path: Path) -> None:
    result = run_web(["--database-url", f"sqlite:///{tmp_path / 'none.db'}"])
    assert result.exit_code != 0
    assert len(result.output.strip().splitlines()) == 1
    assert result.output.startswith("error: ")


async def test_the_lists_show_a_read_at_most_one_refresh_behind(store: StateStore) -> None:
    """Issue 42: a watcher or held list never waits for the triggerers to be read anew
    while the last read is under 5 s old: it shows that one and the next read is taken
    meanwhile; an older read is waited for."""
    from sharedstream.triggerer.registration import GroupDeclaration, register_groups
    from sharedstream.web.sources import Sources

    now = [0.0]

    def declare(*names: str) -> None:
        register_groups(store, [GroupDeclaration(("kafka", ("t",), None), "g",
                                                 frozenset(names))], takeover=True)

    def listed(rows: list[dict[str, Any]]) -> list[str]:
        return [row["name"] for row in rows]

    sources = Sources(ConsoleSettings(), store, clock=lambda: now[0])
    try:
        declare("a")
        assert listed(await sources.watcher_list()) == ["a"]  # the first read, waited for
        declare("a", "b")
        now[0] = 2.0  # past the second a read is fresh for, under 5 s
        assert listed(await sources.watcher_list()) == ["a"]  # the last read, at once
        await sources.snapshot()  # the read started meanwhile ends
        assert listed(await sources.watcher_list()) == ["a", "b"]
        declare("a", "b", "c")
        now[0] = 8.0  # over 5 s old: waited for
        assert listed(await sources.watcher_list(q="C")) == ["c"]
    finally:
        sources.close()

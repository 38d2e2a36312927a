"""The console in a real Chromium, over a real broker, PostgreSQL and two triggerers.

One stack for the module: two ``sharedstream run`` processes of the e2e watcher module
(``everything``, ``flaky`` failing ids divisible by 50 while its flag file exists,
``picky`` dead-lettering ids ending in 07) sharing a three-partition topic, and
``sharedstream web`` bound to 0.0.0.0 with a token (Chromium logs in with basic auth).
Every wait is a condition with a deadline: Playwright's ``expect`` and
``wait_for_function`` poll the page (which re-fetches its live part every 2 s). The
tests run in file order, each going on from the state the previous one left (messages
held, then resolved, then counted on the asset pages).

The pictures of docs/console.md are these tests' screenshots: set
``SHAREDSTREAM_SCREENSHOTS=1`` to write them to docs/images/ (otherwise they go to the
test's tmp dir, so the run never changes the work tree).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic
from db_schemas import postgres_schema_url
from playwright.sync_api import Browser, Page, expect
from streams import create_schema, produce
from triggerer import Triggerer, Triggerers, connection_for, until, write_config

from kafka_writes import ordered_producer
from sharedstream.core.message import Coordinates
from sharedstream.kafka.dlq_headers import build_dlq_headers
from sharedstream.statestore.scopes import TaskScope
from sharedstream.statestore.store import StateStore

pytestmark = pytest.mark.e2e
expect.set_options(timeout=30_000)

ROOT = Path(__file__).resolve().parents[2]
# `sharedstream web` without relying on the root command's registration.
WEB = (sys.executable, "-c", "from sharedstream.web.command import web; web()")
_LISTENING = re.compile(r"console on http://\S+?:(\d+)/")
PARTITIONS = 3
MARKUP = '<script>window.pwned=1</script><img src=x onerror="window.pwned=2">'


@dataclass
class Stack:
    url: str
    token: str
    topic: str
    dlq: str
    bootstrap: str
    group: str
    flag: Path
    processes: list[Triggerer]
    page: Page
    shots: Path

    def shot(self, name: str) -> None:
        self.page.screenshot(path=str(self.shots / f"console-{name}.png"), full_page=False)


def make_topic(admin: AdminClient, name: str, partitions: int) -> str:
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)]
                        )[name].result(30)

    def led() -> bool:
        meta = admin.list_topics(topic=name, timeout=5.0).topics.get(name)
        return bool(meta is not None and meta.error is None
                    and len(meta.partitions) == partitions
                    and all(p.leader >= 0 for p in meta.partitions.values()))

    until(led, f"leaders of {name}", 30)
    return name


def start_console(root: Path, config: Path, dlq: str, token: str,
                  extra_env: dict[str, str] | None = None
                  ) -> tuple[subprocess.Popen[bytes], int, Path]:
    log = root / "web.log"
    env = {**os.environ, "SHAREDSTREAM__WEB__TOKEN": token, "PYTHONUNBUFFERED": "1",
           **(extra_env or {})}
    with log.open("wb") as out:
        process = subprocess.Popen(
            [*WEB, "--config", str(config), "--host", "0.0.0.0", "--port", "0",
             "--dlq-topic", dlq, "--connection", "e2e", "--sample-interval", "1"],
            cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT)

    def port() -> int | None:
        assert process.poll() is None, f"the console exited: {log.read_text()}"
        found = _LISTENING.search(log.read_text())
        return int(found.group(1)) if found else None

    return process, until(port, "the console's listening line", 30), log


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, kafka_bootstrap: str, database_url: str,
          kafka_admin: AdminClient, browser: Browser) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("console")
    admin = kafka_admin  # the session's: playwright keeps this frame in reference cycles
    suffix = uuid.uuid4().hex[:8]
    topic = make_topic(admin, f"web-orders-{suffix}", PARTITIONS)
    dlq = make_topic(admin, f"web-orders-dlq-{suffix}", 1)
    shots = ROOT / "docs" / "images" if os.environ.get("SHAREDSTREAM_SCREENSHOTS") \
        else root / "shots"
    shots.mkdir(parents=True, exist_ok=True)
    schema = postgres_schema_url(database_url)
    url = next(schema)
    create_schema(url)  # both triggerers start on a migrated database
    with StateStore.from_url(url) as store:  # something for the state browser to show
        store.task(TaskScope("orders_daily", "scheduled__2026-05-01T00:00:00+00:00", "load")
                   ).set("progress", {"rows": 1200, "last_id": 449})
    # A killed member keeps its partitions at the broker until its session times out:
    # 20 s leaves the last test ample time to see them flagged before the takeover.
    connection = {**connection_for(kafka_bootstrap, "web"), "session.timeout.ms": 20000}
    config = write_config(root / "sharedstream.toml", database_url=url, connection=connection,
                          triggerer={"max_attempts": 1000, "retry_backoff_initial": 0.2,
                                     "retry_backoff_max": 1.0})
    flag = root / "flaky.flag"
    flag.touch()
    env = {"E2E_TOPIC": topic, "E2E_DLQ": dlq, "E2E_WATCHERS": "everything,flaky,picky",
           "E2E_FLAKY_FLAG": str(flag)}
    pool = Triggerers(root)
    token = secrets.token_urlsafe(24)
    web = None
    context = None
    try:
        processes = [pool(config, env=env).start() for _ in range(2)]
        for process in processes:
            process.wait_ready(90)
        produce(kafka_bootstrap, topic, range(150), PARTITIONS)
        web, port, _ = start_console(root, config, dlq, token)
        context = browser.new_context(http_credentials={"username": "ops", "password": token},
                                      viewport={"width": 1440, "height": 900})
        context.set_default_timeout(30_000)
        yield Stack(f"http://127.0.0.1:{port}", token, topic, dlq, kafka_bootstrap,
                    f"{connection['group.id']}.{topic}", flag, processes, context.new_page(),
                    shots)
    finally:
        if context is not None:
            context.close()
        if web is not None:
            web.terminate()
            web.wait(30)
        pool.kill_all()
        admin.delete_topics([topic, dlq], operation_timeout=10)
        schema.close()


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str]]:
    """``(status, headers with lower-case names)`` of a GET."""
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            found = reply.status, reply.headers
    except urllib.error.HTTPError as error:
        found = error.code, error.headers
    return found[0], {k.lower(): v for k, v in found[1].items()}


def api(stack: Stack, path: str) -> Any:
    request = urllib.request.Request(f"{stack.url}/api/v1{path}",
                                     headers={"Authorization": f"Bearer {stack.token}"})
    with urllib.request.urlopen(request, timeout=10) as reply:
        return json.load(reply)


UTC_ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


def refreshed(page: Page) -> None:
    """Wait for the page's live part to be fetched anew, and say when in UTC."""
    page.wait_for_function("() => +document.getElementById('live').dataset.refreshed >= 1")
    expect(page.locator("#refresh-status")).to_have_text(
        re.compile(rf"^updated {UTC_ISO.pattern}$"))


def lag_lines(page: Page) -> dict[str, int]:
    found: dict[str, int] = page.eval_on_selector_all(
        "polyline.lag-line",
        "lines => Object.fromEntries(lines.map(l => [l.dataset.partition, +l.dataset.last]))")
    return found


def test_the_overview_shows_both_triggerers(stack: Stack) -> None:
    page = stack.page
    page.goto(f"{stack.url}/")
    rows = page.locator("tr.triggerer")
    expect(rows).to_have_count(2)
    # Alive with a /status that answers (ready or not: the flaky watcher restarts its filter).
    expect(page.locator("tr.triggerer[data-health=ok], tr.triggerer[data-health=not_ready]")
           ).to_have_count(2)
    assert sorted(page.locator("tr.triggerer .pid").all_inner_texts()) == sorted(
        str(p.pid) for p in stack.processes)
    group = page.locator(f'tr.group[data-group="{stack.group}"]')
    expect(group).to_have_attribute("data-health", "held")
    expect(group).to_have_attribute("data-lag", re.compile(r"\d+"))  # the brokers' ends known
    stack.shot("overview")


def test_the_held_page_and_a_triggerers_page(stack: Stack) -> None:
    page = stack.page
    page.goto(f"{stack.url}/held")
    # id 50 is message 16 of partition 2 (ids go to partition id % 3).
    row = page.locator(f'tr.held[data-group="{stack.group}"][data-offset="16"]'
                       '[data-watcher="flaky"]')
    expect(row.locator(".reason")).to_contain_text("flaky watcher fails on id 50")
    owner = row.locator("a.owner")
    expect(owner).to_have_text(re.compile(r"^.+:\d+$"))  # host:pid, not a truncated id
    host_pid = owner.inner_text()
    pid = host_pid.rpartition(":")[2]
    assert pid in {str(p.pid) for p in stack.processes}
    refreshed(page)
    stack.shot("held")
    owner.click()
    expect(page.locator("h1")).to_contain_text(host_pid)
    facts = page.locator("#triggerer")
    expect(facts.locator(".pid")).to_have_text(pid)
    expect(facts.locator("td[data-health]")).to_have_attribute(
        "data-health", re.compile("^(ok|not_ready)$"))
    expect(facts.locator(".last-seen")).to_have_text(re.compile(rf"^{UTC_ISO.pattern} \("))
    expect(facts).to_contain_text("orders.py")  # the watcher module it runs
    group = page.locator(f'#triggerer-groups tr.group[data-group="{stack.group}"]')
    expect(group.locator(".partitions")).to_contain_text(f"{stack.topic}[2]")  # it holds 16
    expect(page.locator('#held tr.held[data-offset="16"][data-watcher="flaky"]')
           ).to_have_count(1)
    expect(page.locator("#triggerer-destinations")).to_contain_text("no destinations")
    stack.shot("triggerer")


def test_the_watchers_page_lists_each_watcher_and_its_tables_sort(stack: Stack) -> None:
    page = stack.page
    page.goto(f"{stack.url}/watchers")
    rows = page.locator(f'#watchers tr.watcher[data-group="{stack.group}"]')
    expect(rows).to_have_count(3)
    expect(rows.filter(has_text="flaky").locator(".held")).not_to_have_text("0")

    def names() -> list[str]:
        found: list[str] = page.locator("#watchers tr.watcher").evaluate_all(
            "rows => rows.map(r => r.dataset.watcher)")
        return found

    header = page.locator("#watchers thead th").first
    header.click()
    expect(header).to_have_attribute("data-sorted", "ascending")
    assert names() == sorted(names())
    header.click()
    expect(header).to_have_attribute("data-sorted", "descending")
    assert names() == sorted(names(), reverse=True)
    refreshed(page)  # a refresh keeps the order the reader chose
    expect(header).to_have_attribute("data-sorted", "descending")
    assert names() == sorted(names(), reverse=True)
    stack.shot("watchers")


def test_a_held_message_shows_its_reason_the_lag_chart_moves_then_it_resolves(
        stack: Stack) -> None:
    page = stack.page
    page.goto(f"{stack.url}/groups/{stack.group}")
    # id 50 is message 16 of partition 2 (ids go to partition id % 3).
    held = page.locator('tr.held[data-offset="16"][data-watcher="flaky"] .reason')
    expect(held).to_contain_text("flaky watcher fails on id 50")
    # Held at their floors, the three partitions lag: each line ends above zero.
    page.wait_for_function(
        "n => [...document.querySelectorAll('polyline.lag-line')]"
        ".filter(l => +l.dataset.last > 0).length === n", arg=PARTITIONS)
    before = lag_lines(page)
    produce(stack.bootstrap, stack.topic, range(150, 450), PARTITIONS)
    # 100 more messages per partition above each held floor: each line rises by 100.
    page.wait_for_function(
        "before => { const lines = [...document.querySelectorAll('polyline.lag-line')];"
        " return lines.length === Object.keys(before).length && lines.every("
        "l => +l.dataset.last >= before[l.dataset.partition] + 100); }", arg=before)
    stack.shot("group")
    stack.flag.unlink()  # the flaky watcher succeeds from its next attempt on
    expect(page.locator("#held tr.none")).to_have_count(1)
    page.wait_for_function(
        "() => { const lines = [...document.querySelectorAll('polyline.lag-line')];"
        " return lines.length > 0 && lines.every(l => l.dataset.last === '0'); }")
    assert int(page.locator("svg.lag-chart").get_attribute("data-samples") or 0) > 3


def test_a_dead_letter_with_markup_is_shown_as_text(stack: Stack) -> None:
    producer = ordered_producer(stack.bootstrap)
    origin = Coordinates(stack.topic, "hand-made", 0, 999_999, int(time.time() * 1000))
    producer.produce(stack.dlq, value=MARKUP.encode(), key=b"<b>key</b>", headers=build_dlq_headers(
        original_headers=[], origin=origin, consumer_group=stack.group,
        rejections={"picky": "<i>not</i> today"}, replay_count=0))
    assert producer.flush(30) == 0
    page = stack.page

    def shown() -> bool:
        page.goto(f"{stack.url}/dead-letters?topic={stack.dlq}")
        values = page.locator("#dead-letters td.value").all_inner_texts()
        return any("window.pwned=1" in value for value in values)

    until(shown, "the hand-made dead letter on the page", 60, interval=1.0)
    cell = page.locator("#dead-letters td.value", has_text="window.pwned=1")
    expect(cell).to_have_text(MARKUP)  # the markup itself, as text
    expect(page.locator("#dead-letters td.key", has_text="<b>key</b>")).to_have_count(1)
    expect(page.locator("#dead-letters .reason", has_text="<i>not</i> today")).to_have_count(1)
    assert page.evaluate("window.pwned") is None
    assert page.locator("#dead-letters img, #dead-letters i, #dead-letters b >> text=key"
                        ).count() == 0
    assert page.locator("script").count() == 1  # console.js only
    # Picky's own rejections (ids 7, 107, ... 407), grouped by watcher and reason.
    expect(page.locator("table.histogram", has_text="by watcher")).to_contain_text("picky")
    reasons = page.locator("table.histogram", has_text="by reason")
    expect(reasons).to_contain_text("id 407 ends in 07")
    refreshed(page)  # this page refreshes too
    stack.shot("dead-letters")
    # One search over reasons, keys and values (case-insensitive).
    records = page.locator("#dead-letters tr.dead-letter")
    for text, matches in (("<B>KEY", 1), ("window.pwned=1", 1), ("<i>not</i>", 1),
                          ("id 407 ENDS in 07", 1), ("ends in 07", 5)):
        page.goto(f"{stack.url}/dead-letters?" + urllib.parse.urlencode(
            {"topic": stack.dlq, "q": text}))
        expect(records).to_have_count(matches)
        expect(page.locator("#dead-letter-matches")).to_have_text(str(matches))


def test_the_asset_and_state_pages_show_events_and_watermarks(stack: Stack) -> None:
    page = stack.page
    page.goto(f"{stack.url}/assets")
    expect(page.locator("#assets")).to_contain_text("everything")
    refreshed(page)  # the assets list refreshes too, and pauses
    page.locator("#refresh-toggle").click()
    expect(page.locator("#refresh-status")).to_have_text("paused")
    expect(page.locator("#refresh-toggle")).to_have_text("resume")
    page.goto(f"{stack.url}/assets/everything")
    watermark = page.locator("table.state tr", has_text="watermark").locator("td.value summary")
    expect(watermark).to_have_text("449")
    expect(page.locator("svg.timeline")).to_have_attribute("data-total", "450")
    stack.shot("asset")
    page.goto(f"{stack.url}/state?asset=flaky")
    expect(page.locator("table.state tr", has_text="watermark")).to_contain_text("449")
    stack.shot("state")


def test_off_loopback_every_request_needs_the_token(stack: Stack, tmp_path: Path) -> None:
    for path in ("/", "/api/v1/overview", "/api/v1/openapi.json", "/static/console.js",
                 f"/groups/{stack.group}"):
        status, headers = get(stack.url + path)
        assert status == 401, path
        assert headers.get("www-authenticate", "").startswith("Basic"), path
        assert get(stack.url + path, {"Authorization": "Bearer wrong-token-0123456789"}
                   )[0] == 401
        assert get(stack.url + path, {"Authorization": f"Bearer {stack.token}"})[0] == 200
    reply = urllib.request.urlopen(urllib.request.Request(
        f"{stack.url}/api/v1/triggerers?state=alive",
        headers={"Authorization": f"Bearer {stack.token}"}), timeout=10)
    assert json.load(reply)["total"] == 2
    # Without a token the console does not start off loopback: one line, exit 2.
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHAREDSTREAM__WEB__")}
    refused = subprocess.run([*WEB, "--host", "0.0.0.0", "--database-url",
                              f"sqlite:///{tmp_path / 'none.db'}"], env=env, cwd=tmp_path,
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2
    assert refused.stderr.splitlines() == [
        "error: refusing to serve on 0.0.0.0 without a token: set SHAREDSTREAM__WEB__TOKEN "
        "(or --token), or bind 127.0.0.1"]


def test_a_killed_triggerers_partitions_are_flagged_then_the_lag_comes_from_the_broker(
        stack: Stack) -> None:
    page = stack.page
    victim, survivor = stack.processes
    victim.kill()
    # At once, well before the broker's session timeout hands them to the survivor:
    # the survivor's report leaves the victim's partitions out.
    group = until(lambda: (g := api(stack, f"/groups/{stack.group}"))["unowned"] and g,
                  "the killed triggerer's partitions flagged", 15, interval=0.2)
    assert group["health"] == "unowned"
    page.goto(f"{stack.url}/groups/{stack.group}")
    expect(page.locator("#unowned")).to_contain_text(group["unowned"][0])
    expect(page.locator("#partitions tr.partition.unowned")).to_have_count(
        len(group["unowned"]))
    page.goto(f"{stack.url}/")
    row = page.locator(f'tr.group[data-group="{stack.group}"]')
    expect(row).to_have_attribute("data-health", "unowned")
    expect(row.locator(".unowned")).to_contain_text(group["unowned"][0])
    stack.shot("overview-unowned")
    survivor.kill()
    # Nobody runs the group: its lag is the broker's committed lag, on every page.
    expect(row).to_have_attribute("data-health", "no_triggerer")
    expect(row).to_have_attribute("data-lag", re.compile(r"^\d+$"))
    expect(row.locator("td.num").first).to_have_text(str(PARTITIONS))  # partitions
    page.goto(f"{stack.url}/groups/{stack.group}")
    expect(page.locator("#chart-source")).to_have_attribute("data-source", "kafka")
    page.wait_for_function(
        "n => { const lines = [...document.querySelectorAll('polyline.lag-line')];"
        " return lines.length === n && lines.every(l => l.dataset.source === 'kafka'); }",
        arg=PARTITIONS)
    committed = {f"{p['topic']}[{p['partition']}]": p["committed_lag"]
                 for p in api(stack, f"/groups/{stack.group}")["partitions"]}
    assert lag_lines(page) == committed

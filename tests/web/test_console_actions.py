"""The console's actions in a real Chromium, over a real broker, PostgreSQL and a triggerer.

One stack for the module: one ``sharedstream run`` of the e2e watcher module (``flaky``
failing id 0 while its flag file exists, with a 10-minute backoff so that only an
operator's retry hands it out again soon), and ``sharedstream web`` with a read token
(Chromium logs in with it, basic auth) and one operate token named ``alice``, typed
into the Actions page. ``SHAREDSTREAM_SCREENSHOTS=1`` writes docs/images/console-actions.png.
Each action and each refusal goes through the page where the
page offers it (the confirmation panel, the preview), and through the API with the
right header where the page cannot be made to send another (no token at all, the
operate token as basic auth). Every wait is a condition with a deadline.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from db_schemas import postgres_schema_url
from playwright.sync_api import Browser, Page, expect
from sqlalchemy import insert, select
from streams import create_schema, produce
from test_console_browser import ROOT, make_topic, start_console
from triggerer import Triggerers, connection_for, run_cli, write_config

from kafka_writes import ordered_producer
from sharedstream.core.message import Coordinates
from sharedstream.kafka.dlq_headers import build_dlq_headers
from sharedstream.statestore.models import audit_entry, triggerer_process
from sharedstream.statestore.store import StateStore
from sharedstream.statestore.types import utcnow

pytestmark = pytest.mark.e2e
expect.set_options(timeout=30_000)


@dataclass
class Stack:
    url: str
    token: str
    operate: str
    topic: str
    dlq: str
    bootstrap: str
    group: str
    flag: Path
    database_url: str
    triggerer_id: str
    page: Page
    root: Path
    shots: Path

    def audit(self) -> list[dict[str, Any]]:
        with StateStore.from_url(self.database_url) as store, store.engine.connect() as c:
            return [dict(r) for r in c.execute(select(audit_entry)
                                               .order_by(audit_entry.c.id)).mappings()]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, kafka_bootstrap: str, database_url: str,
          kafka_admin: AdminClient, browser: Browser) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("actions")
    shots = ROOT / "docs" / "images" if os.environ.get("SHAREDSTREAM_SCREENSHOTS") \
        else root / "shots"
    shots.mkdir(parents=True, exist_ok=True)
    suffix = uuid.uuid4().hex[:8]
    topic = make_topic(kafka_admin, f"act-orders-{suffix}", 1)
    dlq = make_topic(kafka_admin, f"act-orders-dlq-{suffix}", 1)
    schema = postgres_schema_url(database_url)
    url = next(schema)
    create_schema(url)
    connection = connection_for(kafka_bootstrap, "act")
    config = write_config(root / "sharedstream.toml", database_url=url, connection=connection,
                          triggerer={"max_attempts": 1000, "retry_backoff_initial": 600.0,
                                     "retry_backoff_max": 600.0})
    flag = root / "flaky.flag"
    flag.touch()
    env = {"E2E_TOPIC": topic, "E2E_DLQ": dlq, "E2E_WATCHERS": "everything,flaky",
           "E2E_FLAKY_FLAG": str(flag)}
    pool = Triggerers(root)
    token, operate = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    web = context = None
    try:
        process = pool(config, env=env).start()
        process.wait_ready(90)
        produce(kafka_bootstrap, topic, range(3), 1)  # id 0 fails: held at offset 0
        web, port, _ = start_console(root, config, dlq, token, {
            "SHAREDSTREAM__WEB__OPERATE_TOKENS": f'{{alice = "{operate}"}}'})
        context = browser.new_context(http_credentials={"username": "ops", "password": token},
                                      viewport={"width": 1440, "height": 900})
        context.set_default_timeout(30_000)
        with StateStore.from_url(url) as store, store.engine.connect() as c:
            live_id = c.execute(select(triggerer_process.c.id)).scalar_one()
        yield Stack(f"http://127.0.0.1:{port}", token, operate, topic, dlq, kafka_bootstrap,
                    f"{connection['group.id']}.{topic}", flag, url, live_id,
                    context.new_page(), root, shots)
    finally:
        if context is not None:
            context.close()
        if web is not None:
            web.terminate()
            web.wait(30)
        pool.kill_all()
        kafka_admin.delete_topics([topic, dlq, f"{dlq}.replay"], operation_timeout=10)
        schema.close()


def post(stack: Stack, action: str, body: dict[str, Any],
         authorization: str | None) -> tuple[int, dict[str, Any]]:
    headers = {"Content-Type": "application/json"}
    if authorization is not None:
        headers["Authorization"] = authorization
    request = urllib.request.Request(f"{stack.url}/api/v1/actions/{action}",
                                     data=json.dumps(body).encode(), headers=headers,
                                     method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, json.load(reply)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def confirm(page: Page, expected: str) -> None:
    """Confirm in the page's panel, then wait for the result line."""
    expect(page.locator("#confirm")).to_be_visible()
    page.locator("#confirm-yes").click()
    expect(page.locator("#action-result")).to_contain_text(expected)


def test_a_retry_without_the_operate_role_is_refused_and_audited(stack: Stack) -> None:
    page = stack.page
    page.goto(f"{stack.url}/actions")
    row = page.locator(f'#held-actions tr.held[data-topic="{stack.topic}"][data-offset="0"]')
    expect(row).to_have_count(1)
    # No operate token typed: the browser sends only its basic-auth read token.
    row.locator("button.act").click()
    confirm(page, "needs the operate role")
    expect(page.locator("#action-result")).to_have_attribute("data-state", "refused")
    body = {"consumer_group": stack.group, "topic": stack.topic, "partition": 0, "offset": 0}
    # No token at all is stopped by the guard; the operate token as basic auth only reads.
    assert post(stack, "held-retry", body, None)[0] == 401
    basic = "Basic " + base64.b64encode(f"x:{stack.operate}".encode()).decode()
    status, reply = post(stack, "held-retry", body, basic)
    assert (status, list(reply)) == (403, ["detail"])
    assert stack.operate not in json.dumps(reply)
    refused = [a for a in stack.audit() if a["action"] == "held retry"]
    assert [(a["actor"], a["ok"]) for a in refused] == [("console:read", False),
                                                         ("console:alice", False)]
    assert all(a["result"] == "refused: the read role cannot act" for a in refused)
    expect(row).to_have_count(1)  # still held


def test_retry_now_hands_the_held_message_out_at_once(stack: Stack) -> None:
    page = stack.page
    page.goto(f"{stack.url}/actions")
    page.locator("#operate-token").fill(stack.operate)
    stack.flag.unlink()  # the next attempt succeeds; its backoff alone would take 10 min
    row = page.locator(f'#held-actions tr.held[data-topic="{stack.topic}"][data-offset="0"]')
    row.locator("button.act").click()
    expect(page.locator("#confirm-what")).to_contain_text(f"{stack.topic}[0]@0")
    page.screenshot(path=str(stack.shots / "console-actions.png"))
    confirm(page, f"retry requested from triggerer {stack.triggerer_id}")
    expect(page.locator("#held-actions tr.held")).to_have_count(0)  # within a heartbeat
    done = [a for a in stack.audit() if a["action"] == "held retry" and a["ok"]]
    assert [a["actor"] for a in done] == ["console:alice"]
    assert done[0]["target"] == f"{stack.group} {stack.topic}[0]@0"
    # Nobody holds it any more: a clear refusal, audited.
    status, reply = post(stack, "held-retry", {"consumer_group": stack.group,
                                               "topic": stack.topic, "partition": 0,
                                               "offset": 0}, f"Bearer {stack.operate}")
    assert status == 409
    assert "is not held by any live triggerer" in reply["detail"]
    assert stack.audit()[-1]["ok"] is False
    expect(page.locator("#audit tr.audit[data-action='held retry'][data-ok=yes]")
           ).to_have_count(1)


def test_forget_removes_a_stale_triggerer_and_refuses_a_live_one(stack: Stack) -> None:
    gone = uuid.uuid4().hex
    with StateStore.from_url(stack.database_url) as store, store.engine.begin() as c:
        then = utcnow() - timedelta(minutes=5)  # a killed process's row
        c.execute(insert(triggerer_process).values(
            id=gone, host="old-host", pid=4242, version="0.1.0", watchers="[]", groups="[]",
            status_url=None, started_at=then, last_seen=then))
    page = stack.page
    page.goto(f"{stack.url}/actions")
    page.locator("#operate-token").fill(stack.operate)
    row = page.locator(f'#stale-actions tr.stale[data-triggerer="{gone}"]')
    row.locator("button.act").click()
    confirm(page, "forgot old-host pid 4242")
    expect(row).to_have_count(0)
    status, reply = post(stack, "triggerer-forget", {"triggerer_id": stack.triggerer_id},
                         f"Bearer {stack.operate}")
    assert status == 409 and "is alive" in reply["detail"]
    # The CLI is the same action: refused for the live one, one error line, audited.
    cli = run_cli(["triggerers", "forget", stack.triggerer_id, "--database-url",
                   stack.database_url], cwd=stack.root)
    assert cli.returncode == 1
    assert cli.stderr.startswith(f"error: triggerer {stack.triggerer_id} (")
    assert "is alive" in cli.stderr and len(cli.stderr.splitlines()) == 1
    forgets = [(a["actor"].split(":")[0], a["ok"]) for a in stack.audit()
               if a["action"] == "triggerers forget"]
    assert forgets == [("console", True), ("console", False), ("cli", False)]


def test_offsets_reset_previews_then_resets_an_idle_group_and_refuses_a_live_one(
        stack: Stack) -> None:
    page = stack.page
    page.goto(f"{stack.url}/actions")
    page.locator("#operate-token").fill(stack.operate)
    form = page.locator("#offsets-reset")
    form.locator("input[name=consumer_group]").fill(stack.group)
    form.locator("button[type=submit]").click()
    expect(page.locator("#action-result")).to_contain_text("live member(s)")
    expect(page.locator("#confirm")).to_be_hidden()  # nothing to confirm
    status, reply = post(stack, "offsets-reset", {"consumer_group": stack.group,
                                                  "to": "earliest"}, f"Bearer {stack.operate}")
    assert status == 409 and "live member(s)" in reply["detail"]
    # A group with committed offsets and no member: previewed, confirmed, reset.
    idle = f"act-idle-{uuid.uuid4().hex[:8]}"
    consumer = Consumer({"bootstrap.servers": stack.bootstrap, "group.id": idle})
    consumer.commit(offsets=[TopicPartition(stack.topic, 0, 2)], asynchronous=False)
    consumer.close()
    form.locator("input[name=consumer_group]").fill(idle)
    form.locator("button[type=submit]").click()
    expect(page.locator("#confirm-preview")).to_have_text(f"{stack.topic}[0] 2 -> 0")
    confirm(page, "reset 1 partition(s)")
    check = Consumer({"bootstrap.servers": stack.bootstrap, "group.id": idle})
    assert check.committed([TopicPartition(stack.topic, 0)], timeout=10)[0].offset == 0
    check.close()
    resets = [(a["target"], a["ok"]) for a in stack.audit() if a["action"] == "offsets reset"]
    # The refused preview is in the audit too (every refusal is); the one that ran is not.
    assert resets == [(f"{stack.group} --to earliest (dry run)", False),
                      (f"{stack.group} --to earliest", False),
                      (f"{idle} --to earliest", True)]


def test_dlq_replay_dry_run_shows_what_would_go_then_replays_it(stack: Stack) -> None:
    producer = ordered_producer(stack.bootstrap)
    for offset, (watcher, reason) in enumerate([("flaky", "too big"), ("flaky", "bad id"),
                                                ("everything", "too big")]):
        origin = Coordinates(stack.topic, "hand-made", 0, 1000 + offset, 1)
        producer.produce(stack.dlq, value=b"{}", headers=build_dlq_headers(
            original_headers=[], origin=origin, consumer_group=stack.group,
            rejections={watcher: reason}, replay_count=0))
    assert producer.flush(30) == 0
    page = stack.page
    page.goto(f"{stack.url}/actions")
    page.locator("#operate-token").fill(stack.operate)
    form = page.locator("#dlq-replay")
    form.locator("input[name=watchers]").fill("flaky")
    form.locator("input[name=reasons]").fill("too big")
    form.locator("button[type=submit]").click()
    expect(page.locator("#confirm-what")).to_contain_text("would be replayed 1")
    confirm(page, "examined 3: replayed 1")
    replay = Consumer({"bootstrap.servers": stack.bootstrap, "group.id": "act-check"})
    assert replay.get_watermark_offsets(TopicPartition(f"{stack.dlq}.replay", 0),
                                        timeout=10) == (0, 1)
    replay.close()
    # The audit, in the page and by the command.
    page.goto(f"{stack.url}/actions")
    expect(page.locator("#audit tr.audit[data-action='dlq replay'][data-ok=yes]")
           ).to_contain_text("console:alice")
    listed = run_cli(["audit", "list", "--json", "--limit", "3", "--since", "1h",
                      "--database-url", stack.database_url], cwd=stack.root)
    assert listed.returncode == 0, listed.stderr
    items = json.loads(listed.stdout)["items"]
    assert items[0]["action"] == "dlq replay"
    assert items[0]["at"].endswith("Z") and len(items) == 3


def replayed(stack: Stack) -> int:
    """Records on the replay topic so far."""
    replay = Consumer({"bootstrap.servers": stack.bootstrap, "group.id": "act-check"})
    try:
        return int(replay.get_watermark_offsets(TopicPartition(f"{stack.dlq}.replay", 0),
                                                timeout=10)[1])
    finally:
        replay.close()


def test_a_second_replay_of_the_same_records_works(stack: Stack) -> None:
    """After the filtered replay above, the replay group's position is past all three
    records (issue 43: every later console replay found 0). The page names the group and
    where the replay starts, previews how many it would take, and from the start of the
    topic (or with a new group) replays the same records again."""
    before = replayed(stack)
    page = stack.page
    page.goto(f"{stack.url}/actions")
    page.locator("#operate-token").fill(stack.operate)
    form = page.locator("#dlq-replay")
    expect(form.locator("input[name=group]")).to_have_attribute(
        "placeholder", f"sharedstream-dlq-replay.{stack.dlq}")
    form.locator("button[type=submit]").click()  # where the default group stopped
    expect(page.locator("#confirm-what")).to_contain_text(
        f"group sharedstream-dlq-replay.{stack.dlq} from where it stopped: examined 0")
    page.locator("#confirm-no").click()
    form.locator("select[name=start]").select_option("start")
    form.locator("button[type=submit]").click()
    expect(page.locator("#confirm-what")).to_contain_text(
        "from the start of the topic: examined 3: would be replayed 3")
    confirm(page, "replayed 3")
    assert replayed(stack) == before + 3
    # Once more, the same records, with a group of the operator's naming.
    form.locator("input[name=group]").fill("act-again")
    form.locator("select[name=start]").select_option("stopped")
    form.locator("button[type=submit]").click()
    expect(page.locator("#confirm-what")).to_contain_text(
        "group act-again from where it stopped: examined 3: would be replayed 3")
    confirm(page, "replayed 3")
    assert replayed(stack) == before + 6
    audit = stack.audit()
    assert [a["target"] for a in audit[-2:]] == [
        f"{stack.dlq} --from-start", f"{stack.dlq} --group act-again"]

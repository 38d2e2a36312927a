"""Commands that only read events need none of the destinations' secrets (issue 25.11).

The config is the README's own ``[destinations]`` example, with the ``[airflow.prod]``
section it names (a username; the password, like the webhook's secret, left to the
environment). Through the real command line, with neither variable set: ``events
list``, ``events tail`` and ``events undelivered`` read the database as usual; a command
that sends (``events undelivered --retry``) names the missing key and its variable; and
with both set, the README's example loads as documented.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from triggerer import run_cli

from sharedstream.delivery import undelivered
from sharedstream.statestore.events import insert_events
from sharedstream.statestore.store import StateStore
from sharedstream.statestore.types import utcnow

README = Path(__file__).resolve().parents[2] / "README.md"
PASSWORD = "SHAREDSTREAM__AIRFLOW__PROD__PASSWORD"
SECRET = "SHAREDSTREAM__DESTINATIONS__BILLING__SECRET"


def readme_destinations() -> str:
    """The README's TOML example of ``[destinations]``."""
    [block] = [b for b in re.findall(r"```toml\n(.*?)```", README.read_text(), re.S)
               if "[destinations.billing]" in b]
    return str(block)


@pytest.fixture
def config(tmp_path: Path, sqlite_url: str) -> Path:
    path = tmp_path / "sharedstream.toml"
    path.write_text(f'[database]\nurl = "{sqlite_url}"\n\n[airflow.prod]\n'
                    'base_url = "http://airflow.invalid:8080"\nusername = "sharedstream"\n\n'
                    + readme_destinations())
    return path


@pytest.fixture
def event_id(sqlite_url: str) -> int:
    """One stored event, refused once by ``billing``."""
    store = StateStore.from_url(sqlite_url)
    store.upgrade()
    row = {"asset_id": store.register_asset("orders"), "watcher": "w_orders",
           "payload": '{"n": 7}', "topic": "orders", "topic_id": "tid", "partition": 0,
           "offset": 7, "event_index": 0, "created_at": utcnow()}
    with store.engine.begin() as connection:
        insert_events(connection, [row])
    event: int = row["id"]
    undelivered.record(store.engine, "billing", [(event, "webhook answered 400")], utcnow())
    store.close()
    return event


def test_reading_events_needs_no_destination_secret(
        tmp_path: Path, config: Path, event_id: int) -> None:
    assert PASSWORD not in os.environ and SECRET not in os.environ

    def read(*args: str) -> str:
        done = run_cli([*args, "--config", str(config)], cwd=tmp_path)
        assert (done.returncode, done.stderr) == (0, ""), done.stderr
        return done.stdout

    [listed] = json.loads(read("events", "list", "--json"))["items"]
    assert (listed["id"], listed["payload"]) == (event_id, {"n": 7})
    [line] = read("events", "tail").splitlines()
    assert line.startswith(f"{event_id}  ") and "orders" in line
    [row] = json.loads(read("events", "undelivered", "--json"))
    assert (row["destination"], row["event"]["id"]) == ("billing", event_id)


@pytest.mark.parametrize(("env", "needles"), [
    ({}, ["[airflow.prod] password", PASSWORD]),
    ({PASSWORD: "pw"}, ["[destinations.billing] secret", SECRET]),
])
def test_sending_names_the_missing_secret_and_its_variable(
        tmp_path: Path, config: Path, event_id: int, env: dict[str, str],
        needles: list[str]) -> None:
    done = run_cli(["events", "undelivered", "--retry", "--config", str(config)],
                   cwd=tmp_path, env=env)
    assert done.returncode == 2, (done.stdout, done.stderr)
    [line] = done.stderr.splitlines()
    assert line.startswith("error: ") and "Traceback" not in done.stderr, line
    for needle in needles:
        assert needle in line, (needle, line)


def test_the_readme_example_loads_with_its_secrets_from_the_environment(
        tmp_path: Path, config: Path) -> None:
    done = run_cli(["config", "show", "--config", str(config), "--json"], cwd=tmp_path,
                   env={PASSWORD: "pw", SECRET: "s3cret"})
    assert done.returncode == 0, done.stderr
    shown = {(s["section"], s["key"]): s for s in json.loads(done.stdout)["settings"]}
    billing = shown[("destinations.billing", "secret")]
    assert (billing["value"], billing["source"]) == ("***", SECRET)
    assert shown[("destinations.billing", "url")]["value"] == \
        "https://billing.example/hooks/sharedstream"
    assert shown[("destinations.dags", "instance")]["value"] == "prod"

"""``[airflow.<name>]`` sections: what the loader builds, what it refuses, and that the
password and token never show in a repr or an error message."""

from __future__ import annotations

from pathlib import Path

import pytest

from sharedstream.airflowbridge.settings import AirflowInstanceSettings
from sharedstream.triggerer.config import ConfigError, load_config

PASSWORD = "pw-Secret-4711"
TOKEN = "tok-Secret-0815"


def load(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> dict[
        str, AirflowInstanceSettings]:
    path = tmp_path / "sharedstream.toml"
    path.write_text(text)
    return dict(load_config(path, env=env or {}).airflow)


def refused(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, text)
    message = str(info.value)
    assert PASSWORD not in message and TOKEN not in message
    return message


def test_login_and_token_instances_with_their_limits(tmp_path: Path) -> None:
    instances = load(tmp_path, f'''
[airflow.team_a]
base_url = "http://airflow-a:8080"
username = "bridge"
password = "{PASSWORD}"
max_requests_per_second = 5
burst = 3
request_timeout = 2.5
[airflow.team_b]
base_url = "https://airflow-b.example"
token = "{TOKEN}"
''')
    assert instances == {
        "team_a": AirflowInstanceSettings(
            base_url="http://airflow-a:8080", username="bridge", password=PASSWORD,
            max_requests_per_second=5.0, burst=3, request_timeout=2.5),
        "team_b": AirflowInstanceSettings(base_url="https://airflow-b.example", token=TOKEN),
    }
    defaults = instances["team_b"]
    assert (defaults.max_requests_per_second, defaults.burst, defaults.request_timeout) == (
        0.0, 10, 10.0)


def test_no_airflow_section_means_no_instances(tmp_path: Path) -> None:
    assert load(tmp_path, "") == {}


def test_repr_hides_password_and_token(tmp_path: Path) -> None:
    path = tmp_path / "sharedstream.toml"
    path.write_text(f'''
[airflow.a]
base_url = "http://a:8080"
username = "bridge"
password = "{PASSWORD}"
[airflow.b]
base_url = "http://b:8080"
token = "{TOKEN}"
''')
    config = load_config(path, env={})
    for text in (repr(config.airflow["a"]), repr(config.airflow["b"]), repr(config)):
        assert PASSWORD not in text and TOKEN not in text
    assert "username='bridge'" in repr(config.airflow["a"])


@pytest.mark.parametrize(("body", "reason"), [
    (f'username = "u"\npassword = "{PASSWORD}"\ntoken = "{TOKEN}"', "exactly one"),
    (f'password = "{PASSWORD}"', "username and password go together"),
    ('username = "u"', "username and password go together"),
    ("", "exactly one"),
    (f'token = "{TOKEN}"\nmax_requests_per_second = -1', "max_requests_per_second must be >= 0"),
    (f'token = "{TOKEN}"\nburst = 0', "burst must be >= 1"),
    (f'token = "{TOKEN}"\nrequest_timeout = 0', "request_timeout must be > 0"),
])
def test_invalid_instances_name_the_problem_never_the_secret(
        tmp_path: Path, body: str, reason: str) -> None:
    message = refused(tmp_path, f'[airflow.team_a]\nbase_url = "http://a:8080"\n{body}\n')
    assert "[airflow.team_a]" in message and reason in message


def test_base_url_needs_a_scheme(tmp_path: Path) -> None:
    message = refused(tmp_path, f'[airflow.a]\nbase_url = "a:8080"\ntoken = "{TOKEN}"\n')
    assert "base_url must start with http:// or https://" in message


def test_a_secret_of_the_wrong_type_is_named_not_shown(tmp_path: Path) -> None:
    message = refused(tmp_path, f'''
[airflow.a]
base_url = "http://a:8080"
username = "u"
password = ["{PASSWORD}"]
''')
    assert "[airflow.a] password" in message and "got list" in message


def test_a_misspelt_secret_key_is_named_not_shown(tmp_path: Path) -> None:
    message = refused(tmp_path, f'''
[airflow.a]
base_url = "http://a:8080"
tokn = "{TOKEN}"
''')
    assert "[airflow.a] tokn" in message and "unknown option" in message


def test_an_instance_must_be_a_table(tmp_path: Path) -> None:
    assert "[airflow.a]" in refused(tmp_path, '[airflow]\na = "http://a:8080"\n')


def test_instances_do_not_come_from_environment_variables(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"\[airflow\.<name>\] tables"):
        load(tmp_path, "", env={"SHAREDSTREAM__AIRFLOW__TOKEN": TOKEN})

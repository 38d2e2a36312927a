"""Issue 41 §3.1: a registry connection `check` passed but `run` could never use.

A url with another scheme (``ftp://``) passed ``check`` and failed only when the first
framed message asked the registry (every such message then held for ever). Now the
connection is refused when it is resolved, which `check` and `run` do before anything
connects: one ``error:`` line naming the registry, the url (its password masked) and
the fix. The same for the registry's own settings (``missing.schema.grace.sec``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_lines import error_line, watcher_module

from sharedstream.serde.registries import RegistryConfigError, resolve_registry

pytestmark = pytest.mark.unit

SECRET = "pa55word-never-shown"


@pytest.mark.parametrize("url", [
    f"ftp://reader:{SECRET}@sr:8081", "sr:8081", "https://sr:8081,file:///etc/passwd",
    "httpx://sr:8081"])
def test_a_url_that_is_not_http_is_refused_naming_the_registry_and_the_fix(url: str) -> None:
    with pytest.raises(RegistryConfigError) as refused:
        resolve_registry("orders_sr", {"orders_sr": {"url": url}}, {})
    text = str(refused.value)
    assert text.startswith("schema registry 'orders_sr': url "), text
    assert "http:// or https://" in text and SECRET not in text, text


def test_http_and_https_urls_and_a_list_of_them_pass() -> None:
    for url in ("http://sr:8081", "https://sr/apis/ccompat/v6", "http://a:1, https://b:2"):
        assert resolve_registry("sr", {"sr": {"url": url}}, {})["url"] == url


@pytest.mark.parametrize("value", ["soon", -1, "-0.5"])
def test_a_grace_that_is_not_a_duration_is_refused(value: object) -> None:
    with pytest.raises(RegistryConfigError, match=r"schema registry 'sr': "
                                                  r"'missing\.schema\.grace\.sec' must be"):
        resolve_registry("sr", {"sr": {"url": "http://sr", "missing.schema.grace.sec": value}},
                         {})


def test_check_refuses_an_ftp_registry_in_one_error_line(tmp_path: Path) -> None:
    watcher_module(tmp_path, "AvroValue(registry='orders_sr')", "AvroValue")
    (tmp_path / "sharedstream.toml").write_text(
        '[connections.kafka_default]\n"bootstrap.servers" = "127.0.0.1:9"\n'
        f'[schema_registries.orders_sr]\nurl = "ftp://reader:{SECRET}@sr:8081"\n')
    line = error_line(tmp_path, "check", "watchers.py")
    assert line.startswith("error: watcher 'w': schema registry 'orders_sr': url "), line
    assert "http:// or https://" in line and SECRET not in line, line

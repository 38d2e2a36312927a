from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from sharedstream.triggerer.settings_loader import (
    ConfigError,
    Source,
    build_section,
    env_overrides,
    read_toml,
)


@dataclass(frozen=True)
class Sample:
    size: int = 10
    timeout: float = 1.5
    enabled: bool = False
    name: str = "x"
    backend: str | None = None

    def __post_init__(self) -> None:
        if self.size < 0:
            raise ValueError("size must be >= 0")


SRC = Source(Path("/etc/sharedstream.toml"))


def test_defaults_and_values() -> None:
    s = build_section(Sample, "sample", {"size": 3, "timeout": 2, "enabled": True}, SRC)
    assert s == Sample(size=3, timeout=2.0, enabled=True)
    assert isinstance(s.timeout, float)


def test_unknown_key_names_key_and_file() -> None:
    with pytest.raises(ConfigError, match=r"\[sample\] sise in /etc/sharedstream.toml: unknown"):
        build_section(Sample, "sample", {"sise": 3}, SRC)


def test_wrong_type_names_key_and_expected_type() -> None:
    with pytest.raises(ConfigError, match=r"\[sample\] size .*expected int, got str"):
        build_section(Sample, "sample", {"size": "ten"}, SRC)
    with pytest.raises(ConfigError, match="expected int, got bool"):
        build_section(Sample, "sample", {"size": True}, SRC)


def test_validation_error_is_config_error() -> None:
    with pytest.raises(ConfigError, match="size must be >= 0"):
        build_section(Sample, "sample", {"size": -1}, SRC)


def test_env_overrides_parse_scalars_and_name_variable() -> None:
    env = {
        "SHAREDSTREAM__SAMPLE__SIZE": "42",
        "SHAREDSTREAM__SAMPLE__NAME": "plain text",
        "SHAREDSTREAM__SAMPLE__ENABLED": "true",
        "OTHER": "1",
    }
    found = env_overrides(env)
    assert found == {"sample": {"size": 42, "name": "plain text", "enabled": True}}
    with pytest.raises(ConfigError, match="environment variable SHAREDSTREAM__SAMPLE__TIMEOUT"):
        build_section(Sample, "sample", {"timeout": "soon"}, SRC, frozenset({"timeout"}))


def test_malformed_env_name() -> None:
    with pytest.raises(ConfigError, match="SHAREDSTREAM__ONLYSECTION"):
        env_overrides({"SHAREDSTREAM__ONLYSECTION": "1"})


def test_read_toml_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        read_toml(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[a]\nx = = 1\n")
    with pytest.raises(ConfigError, match=r"bad.toml: invalid TOML: .*line 2"):
        read_toml(bad)

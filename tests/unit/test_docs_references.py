"""The generated references committed in docs/ are current (issue 29): the CLI
reference, the configuration reference and the /metrics list read on GitHub as the
built site shows them. `python3 docs/hooks/references.py` rewrites a stale page."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_generated_block_is_current() -> None:
    """In a fresh interpreter, as a developer runs it: rendered inside the test process
    the pages would depend on what earlier tests left in click's and the loader's
    caches (a subcommand invoked alone caches its help option without ``-h``)."""
    checked = subprocess.run([sys.executable, str(ROOT / "docs/hooks/references.py"),
                              "--check"], cwd=ROOT, capture_output=True, text=True,
                             timeout=120, check=False)
    assert checked.returncode == 0, (
        f"run python3 docs/hooks/references.py: {checked.stdout}{checked.stderr}")


def test_each_reference_is_in_the_pages_not_only_a_marker() -> None:
    text = {name: (ROOT / "docs" / name).read_text(encoding="utf-8")
            for name in ("cli.md", "configuration.md", "operations.md")}
    cli = text["cli.md"].split("<!-- cli-reference -->")[1]
    assert "| `--limit N` |" in cli and "## `sharedstream events tail`" in cli
    assert "--lines" not in cli  # an old spelling stays out, as in --help
    assert "SHAREDSTREAM__TRIGGERER__MAX_IN_FLIGHT" in text["configuration.md"]
    assert "sharedstream_" in text["operations.md"].split("<!-- metrics-reference -->")[1]

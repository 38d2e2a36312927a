"""The generated references committed in docs/ are current (issue 29): the CLI
reference, the configuration reference and the /metrics list read on GitHub as the
built site shows them. `python3 docs/hooks/references.py` rewrites a stale page."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("references", ROOT / "docs/hooks/references.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_generated_block_is_current() -> None:
    references = hook()
    stale = [page.name for page in references.pages()
             if references.refresh(page.read_text(encoding="utf-8"))
             != page.read_text(encoding="utf-8")]
    assert stale == [], "run python3 docs/hooks/references.py"


def test_each_reference_is_in_the_pages_not_only_a_marker() -> None:
    text = {name: (ROOT / "docs" / name).read_text(encoding="utf-8")
            for name in ("cli.md", "configuration.md", "operations.md")}
    cli = text["cli.md"].split("<!-- cli-reference -->")[1]
    assert "| `--limit N` |" in cli and "## `sharedstream events tail`" in cli
    assert "--lines" not in cli  # an old spelling stays out, as in --help
    assert "SHAREDSTREAM__TRIGGERER__MAX_IN_FLIGHT" in text["configuration.md"]
    assert "sharedstream_" in text["operations.md"].split("<!-- metrics-reference -->")[1]

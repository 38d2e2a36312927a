"""Every file of the repository a page cites exists (issue 43: docs/architecture.md cited
DESIGN.md, which is not in the repository).

A path in backticks under one of the repository's folders, or a root file named in
capitals (``CHANGELOG.md``), must be there; what a run writes (``bench/results/``) is
not cited as a file of the repository.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
IN_A_FOLDER = re.compile(
    r"`((?:tests|bench|src|scripts|examples|deploy|tools|docs)/[\w./-]*\w)(?:::[^`]*)?`")
AT_THE_ROOT = re.compile(r"\b([A-Z][A-Z_]+\.md)\b")
WRITTEN_BY_RUNS = ("bench/results/",)


def cited(text: str) -> set[str]:
    found = set(IN_A_FOLDER.findall(text))
    return {p for p in found | set(AT_THE_ROOT.findall(text))
            if not p.startswith(WRITTEN_BY_RUNS)}


def test_every_cited_file_exists() -> None:
    missing = [f"{page.relative_to(ROOT)}: {path}" for page in PAGES
               for path in sorted(cited(page.read_text())) if not (ROOT / path).exists()]
    assert missing == []


def test_the_check_sees_both_kinds_of_citation() -> None:
    assert cited("see `tests/unit/x.py::test_y`, DESIGN.md and `bench/results/a.json`") == {
        "tests/unit/x.py", "DESIGN.md"}

"""Any set of test directories collects in one run, in any order.

The test directories are not packages, so pytest imports every ``conftest.py`` as the one
top-level module ``conftest``, and the directories named on the command line have theirs
imported before anything is collected: the last one named wins. A test module that took a
helper ``from conftest import ...`` then got another directory's conftest and failed at
collection (``pytest tests/integration/statestore tests/unit/core/manager``: "cannot import
name 'FakeClock' from 'conftest'"), while the whole suite, collected directory by
directory, passed. Helpers live in modules of their own name; conftests only hold fixtures.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONFTEST_IMPORT = re.compile(r"^\s*(?:from conftest import|import conftest\b)", re.MULTILINE)


def test_a_directory_that_took_helpers_from_its_conftest_collects_beside_another() -> None:
    # Named first, so the other directory's conftest is the one loaded last.
    dirs = ["tests/integration/statestore", "tests/unit/core/manager"]
    run = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                          "-p", "no:cacheprovider", *dirs],
                         cwd=ROOT, capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]


def test_no_test_module_imports_a_conftest() -> None:
    offenders = []
    for path in sorted([*ROOT.glob("tests/**/*.py"), *ROOT.glob("examples/**/*.py")]):
        text = path.read_text()
        for match in CONFTEST_IMPORT.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            offenders.append(f"{path.relative_to(ROOT)}:{line}")
    assert not offenders, ("import helpers from a module of their own name, not from "
                           f"'conftest' (another directory's may be loaded): {offenders}")

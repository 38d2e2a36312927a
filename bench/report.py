"""Where a bench run's figures go: ``<name>.json`` (everything) and ``<name>.md`` (its
tables), in the results directory; the tables are printed too."""

from __future__ import annotations

import compileall
import json
from pathlib import Path
from typing import Any

import sharedstream


def write_part(out: Path, name: str, found: dict[str, Any], table: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(found, indent=1))
    (out / f"{name}.md").write_text(table)
    print(table)


def compile_measured() -> None:
    """Write the bytecode of the measured code (sharedstream and bench/) before anything is
    timed.

    pip compiles a package when it installs it, so a user's process loads bytecode, as
    the plain confluent-kafka side does here. A checkout under PYTHONDONTWRITEBYTECODE
    (set on the machines these figures come from) would instead compile about a hundred
    modules in every timed process: ~60 ms of start-up that no installed process pays.
    """
    for tree in (Path(sharedstream.__file__).parent, Path(__file__).parent):
        compileall.compile_dir(tree, quiet=1)

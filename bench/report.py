"""Where a bench run's figures go: ``<name>.json`` (everything) and ``<name>.md`` (its
tables), in the results directory; the tables are printed too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_part(out: Path, name: str, found: dict[str, Any], table: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(found, indent=1))
    (out / f"{name}.md").write_text(table)
    print(table)


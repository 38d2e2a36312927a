"""Print the fault suite's figures as the README's Markdown table.

    python -m tests.faults.report [bounded|full|soak]   (default: every mode recorded)

Reads ``bench/results/faults.json``, which the suite's ``figures`` fixture writes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results" / "faults.json"
# Per-scenario extras worth a glance in the notes column.
NOTES = ("sibling_alone_per_s", "sibling_with_slow_and_stuck_per_s", "dlq_duplicate_records",
         "commits_past_persisted", "commits_past_rejected", "rejected_message_rows",
         "advances_per_s", "rss_growth_pct", "slowest_refusal_seconds", "unready_while_down")


def table(section: dict[str, dict[str, object]]) -> str:
    rows = ["| scenario | messages | faults injected | events lost | duplicates "
            "| time to recover (s) | notes |", "|---|---:|---:|---:|---:|---:|---|"]
    for name, figures in section.items():
        recover = figures.get("recover_seconds")
        notes = ", ".join(f"{key}={figures[key]}" for key in NOTES if key in figures)
        rows.append(f"| {name} | {figures['messages']:,} | {figures['faults']:,} "
                    f"| {figures['lost']} | {figures['duplicates']} "
                    f"| {'-' if recover is None else recover} | {notes} |")
    return "\n".join(rows)


def main(argv: list[str]) -> int:
    if not RESULTS.exists():
        print(f"no figures yet: run pytest tests/faults first ({RESULTS})", file=sys.stderr)
        return 1
    recorded = json.loads(RESULTS.read_text())
    for mode in argv or sorted(recorded):
        print(f"### {mode}\n\n{table(recorded[mode])}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

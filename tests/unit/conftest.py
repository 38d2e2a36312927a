"""Where a unit test lives: the room of the module it tests (issue 44).

``tests/unit/<room>/test_<module>.py`` tests ``src/sharedstream/<room>/.../<module>.py``;
a room that is one module (``cli``, ``dlq``) has a folder too. A module tested from
several angles has several files in its room's folder, named by the angle
(``core/test_json_fast_path.py``); a module with many (the manager) has a folder of its
own inside its room's (``core/manager/``, whose conftest pins the retry jitter for those
files alone). A module with no file of its own is named in docs/architecture.md's "Which
test covers what" table, with the test that covers it; ``test_test_layout.py`` holds both.

What stays here, at the top: checks over the whole repository rather than one room (the
rooms' ranks, the public API, the docs, the Helm chart, the monitoring assets, the test
suite's own collection, the scripts' cached builds), and ``cli_lines.py``, the helper
tests of several rooms share.

The folders are not packages, so two test files may not share a basename anywhere under
``tests/`` (pytest imports each as a top-level module). This folder is put on
``sys.path`` so that ``from cli_lines import ...`` works from any room's folder.
"""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

"""How this copy of sharedstream was installed, for install hints that work.

A leaf module (standard library only), so every room can name the command that adds an
extra, the state store's driver errors included, without importing another room.
"""

from __future__ import annotations

import json
import shlex
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path
from urllib.parse import unquote, urlparse


def pip_install(extra: str) -> str:
    """The pip command that adds ``extra`` to this copy of sharedstream, as installed.

    Code run from a source checkout (editable, or on the path) is told that checkout:
    ``sharedstream[extra]`` from an index would replace the code being run, or fail for
    an unreleased version. Otherwise the install record decides (:func:`install_command`).
    The checkout is found from this file, not from metadata: an old ``*.egg-info`` left
    in ``src/`` shadows the editable install's record.
    """
    root = Path(__file__).resolve().parents[3]
    if (root / "pyproject.toml").is_file() and (root / "src" / "sharedstream").is_dir():
        return f"pip install -e {shlex.quote(f'{root}[{extra}]')}"
    try:
        record = distribution("sharedstream").read_text("direct_url.json")
    except PackageNotFoundError:
        record = None
    return install_command(extra, record)


def install_command(extra: str, direct_url: str | None) -> str:
    """The command for an install whose PEP 610 record (``direct_url.json``) is
    ``direct_url``: a local directory is named, editable again if it was; anything else
    (an index, an archive, no record) gets the package's name."""
    info = json.loads(direct_url) if direct_url else {}
    url = urlparse(str(info.get("url", "")))
    if url.scheme != "file" or not isinstance(info.get("dir_info"), dict):
        return f"pip install 'sharedstream[{extra}]'"
    editable = "-e " if info["dir_info"].get("editable") else ""
    return f"pip install {editable}{shlex.quote(f'{unquote(url.path)}[{extra}]')}"

"""``sharedstream.dlq`` moved to ``sharedstream.ops.dlq`` (issue 44): the old name still
imports, warns that it is deprecated, and names the very same objects."""

from __future__ import annotations

import importlib
import sys

import pytest

import sharedstream.ops.dlq as dlq


def test_the_old_module_warns_and_names_the_same_objects(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    monkeypatch.delitem(sys.modules, "sharedstream.dlq", raising=False)
    with pytest.warns(DeprecationWarning, match=r"import from sharedstream\.ops\.dlq"):
        old = importlib.import_module("sharedstream.dlq")
    assert old.__all__ == dlq.__all__
    for name in dlq.__all__:
        assert getattr(old, name) is getattr(dlq, name)

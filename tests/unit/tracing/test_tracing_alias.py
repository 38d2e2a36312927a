"""Tracing moved out of the core to ``sharedstream.tracing`` (issue 44). The path
docs/tracing.md gave embedders, ``sharedstream.core.tracing``, still imports for one
release, warns that it is deprecated, and is the switch itself: a host that turns
tracing on through the old name turns it on for the whole process."""

from __future__ import annotations

import importlib
import sys

import pytest

from sharedstream import tracing


def test_the_old_path_warns_and_reads_the_same_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "sharedstream.core.tracing", raising=False)
    with pytest.warns(DeprecationWarning, match=r"import sharedstream\.tracing"):
        old = importlib.import_module("sharedstream.core.tracing")
    assert old.configure is tracing.configure
    assert old.shutdown is tracing.shutdown
    assert old.TracingConfigError is tracing.TracingConfigError
    monkeypatch.setattr(tracing, "tracer", object())
    assert old.tracer is tracing.tracer

"""Watcher lists in log lines are summarised: a count, the first few, where to see all."""

from __future__ import annotations

import pytest

from sharedstream.core.names import summarise

pytestmark = pytest.mark.unit


def test_a_few_names_are_listed_in_full() -> None:
    assert summarise(["b", "a"]) == "2 watchers: a, b"
    assert summarise([]) == "0 watchers: none"
    assert summarise(["a"]) == "1 watcher: a"


def test_many_names_are_a_count_the_first_few_and_where_to_see_all() -> None:
    line = summarise(f"w{i:05}" for i in range(10_000))
    assert line == ("10,000 watchers: w00000, w00001, w00002, w00003, w00004 and 9,995 more "
                    "(the health server's /status lists them all)")

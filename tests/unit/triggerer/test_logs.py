"""``--log-format json``: one object per line, with the fields the code knows."""

from __future__ import annotations

import json
import logging

from sharedstream.triggerer.logs import JsonFormatter


def test_a_record_becomes_one_json_line_with_its_known_fields() -> None:
    record = logging.LogRecord("sharedstream.core.manager", logging.WARNING, __file__, 1,
                               "watcher %r: restarting", ("orders",), None)
    record.watcher = "orders"
    record.partition = 3
    line = JsonFormatter().format(record)
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["level"] == "WARNING" and entry["logger"] == "sharedstream.core.manager"
    assert entry["message"] == "watcher 'orders': restarting"
    assert (entry["watcher"], entry["partition"]) == ("orders", 3)
    assert "topic" not in entry and entry["time"].endswith("+00:00")


def test_an_exception_stays_inside_the_line() -> None:
    try:
        raise ValueError("bad\nvalue")
    except ValueError:
        import sys
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (),
                                   sys.exc_info())
    line = JsonFormatter().format(record)
    assert "\n" not in line and "ValueError" in json.loads(line)["exception"]

"""The shipped example (``examples/``) plans as its docstring says: one shared group."""

from __future__ import annotations

from pathlib import Path

from sharedstream.triggerer.config import load_config
from sharedstream.triggerer.plan import make_plan

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def test_the_example_runs_three_watchers_on_one_consumer_group() -> None:
    config = load_config(EXAMPLES / "sharedstream.toml", env={})
    plan = make_plan(config, str(EXAMPLES / "orders_watchers.py"))
    [group] = plan.groups
    assert group.watchers == {"valid_orders", "paid_orders", "orders_audit"}
    assert group.topics == ("orders", "orders.dlq")
    assert not plan.standalone

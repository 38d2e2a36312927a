"""A group is composed of parts, never split over files by base classes (issue 44).

Each part has one job and its own state, and stays under about 25 methods: the group
itself, its fan-out, its resolution, its flow control, its commit targets and its
window outbox. A base class of the package's own would count its methods in; none of
them has one.
"""

from __future__ import annotations

import inspect

import pytest

from sharedstream.core.fanout import Fanout
from sharedstream.core.flowcontrol import FlowControl
from sharedstream.core.group import Group
from sharedstream.core.outbox import WindowOutbox
from sharedstream.core.resolution import Resolution
from sharedstream.core.targets import CommitTargets

pytestmark = pytest.mark.unit

PARTS = [Group, Fanout, Resolution, FlowControl, CommitTargets, WindowOutbox]


@pytest.mark.parametrize("part", PARTS, ids=lambda c: c.__name__)
def test_each_part_of_a_group_is_its_own_class_of_at_most_25_methods(part: type) -> None:
    own_bases = [base.__qualname__ for base in part.__mro__[1:]
                 if base.__module__.startswith("sharedstream.")]
    assert own_bases == []
    methods = [name for name, value in vars(part).items()
               if inspect.isfunction(value) or isinstance(value, property)]
    assert len(methods) <= 25, methods

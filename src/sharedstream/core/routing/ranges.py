"""Numeric ranges of many rules, asked which contain a number: a centred interval tree.

Built once per index (O(r log r) for r ranges, O(r) memory: each range is stored at
exactly one node). A query walks one root-to-leaf path, O(log r) nodes, and at each
node reads only ranges that contain the number, plus one that does not (where the
scan stops): O(log r + ranges found). A table of elementary segments would answer in
one bisection, but nested ranges would make it quadratic in memory.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from operator import itemgetter

from sharedstream.core.routing.language import Range

INF = float("inf")
# (low, low_open, high, high_open, rule id): unbounded ends as -inf / +inf (closed).
_Item = tuple[float, bool, float, bool, int]
_by_low = itemgetter(0, 1)


def _by_high(item: _Item) -> tuple[float, bool]:
    return (item[2], not item[3])  # closed before open at the same end, descending


class _Node:
    __slots__ = ("by_high", "by_low", "center", "left", "right")

    def __init__(self, center: float, here: list[_Item]) -> None:
        self.center = center
        self.by_low = sorted(here, key=_by_low)  # open after closed at the same low
        self.by_high = sorted(here, key=_by_high, reverse=True)
        self.left: _Node | None = None
        self.right: _Node | None = None


class Ranges:
    """Rule ids by numeric range (:class:`Range`); :meth:`stab` finds those containing x."""

    __slots__ = ("_root", "size")

    def __init__(self, ranges: Sequence[tuple[Range, int]]) -> None:
        items = [(-INF if r.low is None else r.low, r.low_open,
                  INF if r.high is None else r.high, r.high_open, rule)
                 for r, rule in ranges]
        self.size = len(items)
        # A range holding no number at all (open at both ends of adjacent floats) never
        # matches: leaving it out keeps every node's centre inside one of its ranges.
        self._root = _build([item for item in items if _inside(item) is not None])

    def stab(self, x: float, out: list[int]) -> None:
        """Append the rule id of every range containing ``x`` to ``out``."""
        node = self._root
        while node is not None:
            center = node.center
            if x < center:
                for low, low_open, _, _, rule in node.by_low:
                    if low < x or (low == x and not low_open):
                        out.append(rule)
                    else:
                        break
                node = node.left
            elif x > center:
                for _, _, high, high_open, rule in node.by_high:
                    if x < high or (x == high and not high_open):
                        out.append(rule)
                    else:
                        break
                node = node.right
            else:  # every range kept here contains its centre
                out.extend(item[4] for item in node.by_low)
                return


def _contains(item: _Item, x: float) -> bool:
    low, low_open, high, high_open, _ = item
    return ((low < x or (low == x and not low_open)) and
            (x < high or (x == high and not high_open)))


def _inside(item: _Item) -> float | None:
    """A number the range contains, or None when it contains none."""
    low, low_open, high, high_open, _ = item
    if low == -INF and high == INF:
        x = 0.0
    elif low == -INF:
        x = high if not high_open else math.nextafter(high, -INF)
    elif high == INF:
        x = low if not low_open else math.nextafter(low, INF)
    elif not low_open:
        x = low
    elif not high_open:
        x = high
    else:
        x = low + (high - low) / 2
        if not low < x < high:
            x = math.nextafter(low, INF)
    return x if _contains(item, x) else None


def _build(items: list[_Item]) -> _Node | None:
    """The tree of ``items``, each of which contains some number. Every node keeps at
    least one range (its centre is inside one), so each part below it is smaller."""
    if not items:
        return None
    root: _Node | None = None
    work: list[tuple[list[_Item], _Node | None, bool]] = [(items, None, False)]
    while work:
        part, parent, right = work.pop()
        ends = sorted(e for item in part for e in (item[0], item[2]) if -INF < e < INF)
        center = ends[len(ends) // 2] if ends else 0.0
        if not any(_contains(item, center) for item in part):  # an open end: move inside
            inside = _inside(sorted(part, key=_by_low)[len(part) // 2])
            assert inside is not None
            center = inside
        here, lower, upper = [], [], []
        for item in part:
            if _contains(item, center):
                here.append(item)
            elif item[2] < center or (item[2] == center and item[3]):
                lower.append(item)
            else:
                upper.append(item)
        node = _Node(center, here)
        if parent is None:
            root = node
        elif right:
            parent.right = node
        else:
            parent.left = node
        if lower:
            work.append((lower, node, False))
        if upper:
            work.append((upper, node, True))
    return root


__all__ = ["Ranges"]

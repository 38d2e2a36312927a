"""Routing declared as data: the match language and the index a group routes by.

:mod:`~sharedstream.core.routing.language` says what a match may say and validates it;
:mod:`~sharedstream.core.routing.index` compiles every watcher's match of a group into
one index, with each operator's cost; :mod:`~sharedstream.core.routing.readers` reads
what each selector offers of a message; :mod:`~sharedstream.core.routing.ranges` is the
numeric operator's structure.
"""

from sharedstream.core.routing.index import NOBODY, RoutingIndex
from sharedstream.core.routing.language import MatchError, Rule, Selector, compile_match

__all__ = ["NOBODY", "MatchError", "RoutingIndex", "Rule", "Selector", "compile_match"]

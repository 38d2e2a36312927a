"""What the session's service fixtures share: where a service comes from, and its start.

A session service is someone's running one when its environment variable names it,
else the project's local one (``scripts/localservices``), started only then. A local
service that cannot start fails the test that asked for it with the service's own
output; it never skips.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
from localservices import ServiceError


def external_or_local(request: pytest.FixtureRequest, env_var: str, local_fixture: str,
                      address: Callable[[Any], str]) -> str:
    """``$env_var`` when set, else ``address(...)`` of the fixture ``local_fixture``."""
    external = os.environ.get(env_var)
    if external:
        return external
    return address(request.getfixturevalue(local_fixture))


def start_or_fail(start: Callable[[], None], stop: Callable[[], None], what: str) -> None:
    """``start()``; on a ServiceError, ``stop()`` what was begun and fail the test."""
    try:
        start()
    except ServiceError as error:
        failure = str(error)
    else:
        return
    stop()
    pytest.fail(f"{what} could not be started: {failure}", pytrace=False)

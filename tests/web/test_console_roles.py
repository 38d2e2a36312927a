"""The console's two roles, decided on the server: which token may act and how it must
be sent (unit tests of the settings' checks and of the guard's reading of a header)."""

from __future__ import annotations

import base64

import pytest

from sharedstream.web.app import bearer_name
from sharedstream.web.settings import ConsoleSettings, ConsoleSettingsError

ALICE = "a" * 20
TOKENS = {"alice": ALICE, "bob": "b" * 20}


def test_an_operate_token_acts_only_as_bearer() -> None:
    assert bearer_name(f"Bearer {ALICE}", TOKENS) == "alice"
    assert bearer_name(f"bearer  {ALICE} ", TOKENS) == "alice"
    # Basic auth is what a browser resends on its own: it never carries the operate role.
    basic = base64.b64encode(f"ops:{ALICE}".encode()).decode()
    assert bearer_name(f"Basic {basic}", TOKENS) is None
    assert bearer_name(f"Bearer {ALICE}x", TOKENS) is None
    assert bearer_name(None, TOKENS) is None
    assert bearer_name(f"Bearer {ALICE}", {}) is None


@pytest.mark.parametrize(("tokens", "read", "message"), [
    ({"alice": "short"}, None, "the token of alice must have at least 16 characters"),
    ({"a b": ALICE}, None, "the name 'a b' must be 1 to 64 letters"),
    ({"read": ALICE}, None, "(not read: the read token's name)"),
    ({"alice": ALICE}, ALICE, "the token of alice is the read token"),
    ({"alice": ALICE, "carol": ALICE}, None, "two names share one token"),
])
def test_operate_tokens_that_cannot_work_are_refused_without_echoing_them(
        tokens: dict[str, str], read: str | None, message: str) -> None:
    with pytest.raises(ConsoleSettingsError) as refused:
        ConsoleSettings(token=read, operate_tokens=tokens)
    assert message in str(refused.value)
    assert ALICE not in str(refused.value) and "short" not in str(refused.value)

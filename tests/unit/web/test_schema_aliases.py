"""The API models renamed so that one name means one class (issue 44: ``Asset`` ->
``AssetOut`` ...) still load by their old names for one release, with a warning, and
are the very same models."""

from __future__ import annotations

import pytest

from sharedstream.web import schemas

OLD = ["Asset", "DeadLetter", "Event", "HeldMessage", "StateEntry", "TaskScope",
       "Triggerer", "Undelivered"]


@pytest.mark.parametrize("old", OLD)
def test_the_old_name_warns_and_is_the_renamed_model(old: str) -> None:
    with pytest.warns(DeprecationWarning, match=rf"schemas\.{old} is deprecated: use {old}Out"):
        model = getattr(schemas, old)
    assert model is getattr(schemas, f"{old}Out")


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="Nothing"):
        schemas.Nothing  # noqa: B018

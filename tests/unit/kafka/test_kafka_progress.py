"""Commit-metadata encoding of remembered progress (guarantee 7)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sharedstream.kafka.progress import PREFIX, decode_progress, encode_progress

offsets = st.sets(st.integers(min_value=0, max_value=200_000), max_size=3000)


@given(base=st.integers(min_value=0, max_value=10**12), rel=offsets)
def test_round_trip_when_it_fits(base: int, rel: set[int]) -> None:
    terminal = {base + r for r in rel}
    text = encode_progress(base, terminal, max_chars=1_000_000)
    assert decode_progress(base, text) == terminal


@given(
    base=st.integers(min_value=0, max_value=10**9),
    rel=offsets,
    limit=st.integers(min_value=0, max_value=4000),
)
def test_oversize_keeps_a_prefix_nearest_the_commit_within_the_limit(
    base: int, rel: set[int], limit: int
) -> None:
    terminal = {base + r for r in rel}
    text = encode_progress(base, terminal, max_chars=limit)
    assert len(text.encode()) <= max(limit, 0)
    kept = decode_progress(base, text)
    assert kept <= terminal
    # What is kept is everything below some cut: the messages nearest the floor.
    if kept != terminal:
        cut = min(terminal - kept)
        assert all(o < cut for o in kept)


def test_scattered_offsets_beyond_4096_bytes_fall_back_to_what_fits() -> None:
    terminal = set(range(1, 100_000, 2))  # every other offset: no runs to compress
    text = encode_progress(0, terminal)
    assert len(text) <= 4000
    kept = decode_progress(0, text)
    assert 0 < len(kept) < len(terminal) and kept == {o for o in terminal if o <= max(kept)}


def test_offsets_below_the_commit_are_ignored_and_long_runs_are_cheap() -> None:
    assert encode_progress(10, [1, 2, 3]) == ""
    text = encode_progress(10, range(12, 1_000_012))
    assert len(text) < 20 and decode_progress(10, text) == set(range(12, 1_000_012))


def test_foreign_or_corrupt_metadata_means_nothing_remembered() -> None:
    assert decode_progress(0, "") == set()
    assert decode_progress(0, None) == set()
    assert decode_progress(0, "written by another tool") == set()
    assert decode_progress(0, PREFIX + "!!!") == set()
    assert decode_progress(0, PREFIX + "gA") == set()  # truncated varint

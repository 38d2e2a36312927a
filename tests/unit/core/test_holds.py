"""The hold journal (core/holds.py): what each unit-of-work transaction must write."""

from __future__ import annotations

from sharedstream.core.holds import NOTHING, HoldJournal, HoldKey

A5 = HoldKey("a", "t", 0, 5)
A6 = HoldKey("a", "t", 0, 6)
B5 = HoldKey("b", "t", 0, 5)


def test_a_transaction_takes_the_open_holds_of_its_watchers_only() -> None:
    journal = HoldJournal({"a": "g", "b": "g"})
    journal.opened(A5)
    journal.opened(B5)
    taken = journal.take(["a"])
    assert taken.record == (A5,) and taken.delete == ()
    journal.done(taken, ok=True)
    assert journal.take(["a"]) is NOTHING  # written: not again
    assert journal.take(["b"]).record == (B5,)


def test_a_hold_closed_before_any_transaction_is_never_written() -> None:
    journal = HoldJournal()
    journal.opened(A5)
    journal.closed(A5)
    assert journal.take(["a"]) is NOTHING
    assert len(journal) == 0


def test_a_written_hold_that_closes_is_deleted_by_the_next_transaction() -> None:
    journal = HoldJournal()
    journal.opened(A5)
    journal.done(journal.take(["a"]), ok=True)
    journal.closed(A5)
    taken = journal.take(["b"])  # any transaction deletes
    assert taken.record == () and taken.delete == (A5,)
    journal.done(taken, ok=True)
    assert journal.take(["a", "b"]) is NOTHING


def test_a_rolled_back_transaction_leaves_its_holds_to_the_next() -> None:
    journal = HoldJournal()
    journal.opened(A5)
    journal.opened(A6)
    taken = journal.take(["a"])
    journal.done(taken, ok=False)
    assert set(journal.take(["a"]).record) == {A5, A6}


def test_a_hold_closed_while_its_row_is_being_written_is_deleted_after() -> None:
    journal = HoldJournal()
    journal.opened(A5)
    taken = journal.take(["a"])
    journal.closed(A5)  # acked on a retry while the transaction was in flight
    journal.done(taken, ok=True)
    assert journal.take([]).delete == (A5,)


def test_holds_remembered_from_the_store_are_deleted_when_they_close() -> None:
    journal = HoldJournal()
    journal.loaded(A5)
    assert journal.take(["a"]) is NOTHING
    journal.finished(["a", "b"], "t", 0, 5)
    assert journal.take([]).delete == (A5,)


def test_a_partition_that_leaves_keeps_its_unwritten_holds_queued() -> None:
    """A window of the same watcher may still be in the sink: it must not commit without
    the hold. Written holds are forgotten (their rows stay for the next owner)."""
    journal = HoldJournal()
    journal.opened(A5)
    journal.loaded(A6)
    journal.forget("t", 0)
    assert journal.take(["a"]).record == (A5,)
    journal.closed(A6)
    assert journal.take([]) is NOTHING


def test_a_hold_being_written_when_its_partition_leaves_is_queued_again_if_it_rolls_back(
        ) -> None:
    """The window it was taken for may still commit (the sink retries it): the hold must
    go with it. Once written, its row stays for the next owner (no delete)."""
    journal = HoldJournal()
    journal.opened(A5)
    taken = journal.take(["a"])
    journal.forget("t", 0)
    journal.done(taken, ok=False)
    again = journal.take(["a"])
    assert again.record == (A5,)
    journal.forget("t", 0)
    journal.done(again, ok=True)
    assert journal.take(["a", "b"]) is NOTHING and len(journal) == 0


def test_a_partition_that_comes_back_learns_the_holds_the_store_does_not_have_yet() -> None:
    journal = HoldJournal()
    journal.opened(A5)  # not written
    journal.opened(B5)
    in_flight = journal.take(["b"])  # being written
    journal.forget("t", 0)
    assert journal.open_on("t", 0) == {5: {"a", "b"}}
    journal.loaded(A5)  # the group marks remembered holds loaded: a tracked one keeps its state
    assert journal.take(["a"]).record == (A5,)
    journal.done(in_flight, ok=True)

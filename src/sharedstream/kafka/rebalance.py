"""The rebalance callbacks and the close, on the consumer thread (inside ``consume()``
or ``close()``).

* Assign: the partitions start from their committed offset and the terminal offsets
  remembered above it (commit metadata); the committed offsets are the one round trip
  left in here. The topic-identity watch runs at once after.
* Revoke: the watchers first finish what they were handed of the revoked partitions
  (at most ``revoke_timeout / 2``; held messages are not waited for: what is still open
  then is handed out again by the next owner), pending dead-letter reports are awaited
  (``revoke_timeout``), the loop is asked to publish its targets (bounded wait: a loop
  that does not answer costs re-reading what resolved in the last commit interval), and
  the revoked partitions' targets the broker has not confirmed are committed
  synchronously before the partitions go, even when an asynchronous commit of them is
  still in flight. A refusal the member cannot outlive inside the callback (the group
  moved to a generation it has not joined yet) is a warning and counts in
  ``revoke_commit_failures``: the next owner hands out again what resolved since the
  last confirmed commit. Outcomes arriving later belong to an old generation and are
  dropped.
* Lost: another member may own the partitions already: commit nothing. librdkafka keeps
  the pause of a partition lost (or revoked) while paused; assigned again, it would not
  fetch, and the assignment's resume, made while nothing was assigned, reached none:
  the assign callback pauses or resumes each started partition explicitly.
* Close: the final commit is confirmed before the member leaves, serving a rebalance
  that overtakes it, within ``revoke_timeout``. A static member then unsubscribes to
  leave (unless ``leave_group_on_shutdown`` is off): closing alone would keep its
  partitions for the session timeout.
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, OFFSET_INVALID, KafkaException, TopicPartition

from sharedstream.core.backoff import Backoff
from sharedstream.core.backpressure import PauseReason
from sharedstream.core.contract import PartitionsEnded, PartitionsStarted
from sharedstream.core.counters import AdapterCounters
from sharedstream.core.ledger import Key
from sharedstream.kafka.consumer_core import REBALANCE_ERRORS, ConsumerCore
from sharedstream.kafka.progress import decode_progress

# First pause before a revocation's commit is sent again after another kind of failure.
REVOKE_RETRY_S = 0.1
LEAVE_POLL_S = 0.05  # how often a leaving static member looks whether it was unassigned


class Rebalancing(ConsumerCore):
    """The callbacks ``subscribe()`` is given, and the clean close."""

    def on_assign(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        """Start the partitions from their committed offset and remembered progress (no
        seek in here): the remembered offsets must be known before the first record is
        admitted, or a message handled before would be handed out again."""
        self.watch.check_now()
        committed, known = self._committed(consumer, partitions)
        self.generation += 1
        start: list[TopicPartition] = []
        starts: list[tuple[str, int, int | None, frozenset[int]]] = []
        replay_topic = self.s.replay_topic
        # Known never committed: start where auto.offset.reset says, given explicitly.
        # OFFSET_INVALID would have librdkafka ask for the committed offset again before
        # resetting: 0.1 s more to the first record (bench/startup.py).
        never = self.s.reset_offset if known else OFFSET_INVALID
        for tp in committed:
            base = tp.offset if tp.offset >= 0 else None
            remembered = decode_progress(tp.offset, tp.metadata) if base is not None else ()
            key = (tp.topic, tp.partition)
            self.owned[key] = self.generation
            self.commits.forget(key)
            self.bp.unbound(key)
            starts.append((tp.topic, tp.partition, base, frozenset(remembered)))
            # A replay topic never committed starts at its beginning whatever
            # auto.offset.reset says: "latest" would skip replays made before this start.
            reset = OFFSET_BEGINNING if tp.topic == replay_topic else never
            start.append(TopicPartition(tp.topic, tp.partition, reset if base is None else base))
        held = self._remembered_holds(starts)
        self.hand.inbox.post(PartitionsStarted(self.generation, tuple(starts), held))
        if self.s.incremental:
            consumer.incremental_assign(start)
        else:
            consumer.assign(start)
        # librdkafka keeps a partition's pause across an unassignment: one lost while
        # paused would come back paused, with nothing here to resume it (the group's
        # resume found no assignment). So each start says its state explicitly.
        (consumer.pause if self.bp.assignment is not None else consumer.resume)(start)
        self.publish_paused()
        self.log.info("%s: assigned %s", self.s.consumer_group, _names(start))
        if self.owned:
            self.assigned(time.monotonic())

    def _remembered_holds(self, starts: list[tuple[str, int, int | None, frozenset[int]]]
                          ) -> dict[Key, dict[int, frozenset[str]]]:
        """The holds the group's watchers left on these partitions (core/holds.py): read
        before the first record is admitted, or a message a watcher still owed would
        reach it as an ordinary crash redelivery, which its watermark may skip.

        The store is the database: while it does not answer this retries with backoff
        (an outage holds everything anyway: no unit of work commits), logging once,
        until it answers or the consumer closes (then the partitions go unstarted)."""
        store = self.s.holds
        if store is None or not starts:
            return {}
        asked = [(topic, partition, base) for topic, partition, base, _ in starts]
        backoff = Backoff(REVOKE_RETRY_S, 5.0)
        while True:
            try:
                return store.load(self.s.consumer_group, asked)
            except Exception as exc:  # the database: its errors are many kinds
                if backoff.attempt == 0:
                    self.log.warning("%s: the holds of the assigned partitions cannot be read "
                                     "(%s); retrying until the database answers",
                                     self.s.consumer_group, exc)
                if not self.hand.live:
                    return {}
                time.sleep(backoff.next())

    def _committed(self, consumer: Any, partitions: list[TopicPartition]
                   ) -> tuple[list[TopicPartition], bool]:
        """Committed offsets with metadata, and whether the broker answered; on failure
        the stored offset (librdkafka looks it up itself), forgetful."""
        try:
            result: list[TopicPartition] = consumer.committed(
                partitions, timeout=self.s.revoke_timeout)
            return result, True
        except KafkaException as exc:
            self.log.warning("%s: committed offsets unavailable: %s", self.s.consumer_group,
                             exc)
            return [TopicPartition(tp.topic, tp.partition, OFFSET_INVALID)
                    for tp in partitions], False

    def on_revoke(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        """Let the watchers finish (bounded), deliver pending dead letters, commit the
        revoked resolved prefix, drop the partitions."""
        self.hand.revoking()
        try:
            revoked = frozenset((tp.topic, tp.partition) for tp in partitions)
            timeout = self.s.revoke_timeout
            until = time.monotonic() + timeout / 2
            if revoked and not self.hand.inbox.call_on_loop(
                    lambda done: self._settle(revoked, until, done), timeout):
                self.log.warning("%s: the event loop did not settle within %.1fs",
                                 self.s.consumer_group, timeout)
            if self.sender is not None and self.sender.flush(timeout):
                self.log.warning("%s: dead letters still undelivered at revoke",
                                 self.s.consumer_group)
            self._sync_with_loop()
            self._commit_revoked(consumer, revoked)
            self._drop(partitions)
        finally:
            self.hand.revoked()
        self.log.info("%s: revoked %s", self.s.consumer_group, _names(partitions))

    def _sync_with_loop(self) -> None:
        """Let the loop take what happened so far and publish it. Dead-letter reports
        delivered just before (``flush``) reach the loop first (one FIFO of callbacks),
        so what they made terminal is in the published targets."""
        timeout = self.s.revoke_timeout
        if not self.hand.inbox.call_on_loop(self._publish_now, timeout):
            self.log.warning("%s: the event loop did not publish within %.1fs; committing "
                             "what it published before", self.s.consumer_group, timeout)

    def _commit_revoked(self, consumer: Any, revoked: frozenset[Key]) -> None:
        """Have the broker confirm the revoked partitions' targets before they go.

        A failure is retried with backoff within ``revoke_timeout``, except one saying a
        rebalance overtook the request: inside this callback the member cannot join the
        new generation, so sending again would be refused again.
        """
        timeout = self.s.revoke_timeout
        deadline = time.monotonic() + timeout
        backoff = Backoff(REVOKE_RETRY_S, timeout)
        error = ""
        while True:
            try:
                self.commit(consumer, synchronous=True, only=revoked)
                break
            except KafkaException as exc:
                error = exc.args[0].str()
                delay = backoff.next()
                if exc.args[0].code() in REBALANCE_ERRORS or time.monotonic() + delay > deadline:
                    break
            time.sleep(delay)
        unconfirmed = self.commits.unconfirmed(revoked)
        if unconfirmed:
            self.hand.status.count(_revoke_failed, len(unconfirmed))
            self.log.warning(
                "%s: commit at revoke failed for %s (%s): their next owner hands out again "
                "what they resolved since their last confirmed commit", self.s.consumer_group,
                ", ".join(f"{t}[{p}]" for t, p in unconfirmed), error or "not confirmed")

    def on_lost(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        """Another member may own these already: commit nothing, forget everything."""
        self._drop(partitions)
        self.log.warning("%s: lost %s", self.s.consumer_group, _names(partitions))

    def _drop(self, partitions: list[TopicPartition]) -> None:
        """Forget the partitions here and have the loop end them (the group forgets
        their messages too)."""
        dropped = frozenset(key for tp in partitions
                            if self.owned.pop(key := (tp.topic, tp.partition), None)
                            is not None)
        for key in dropped:
            self.commits.forget(key)
            self.bp.unbound(key)
        if dropped:
            self.hand.inbox.post(PartitionsEnded(dropped))
            self.publish_paused()

    def shutdown(self, consumer: Any) -> None:
        """Clean close: dead letters, final commit, leave the group."""
        if self.sender is not None:
            self.sender.flush(self.s.revoke_timeout)
        self._sync_with_loop()
        self._final_commit(consumer)
        if self.s.instance_id is not None and self.s.leave_on_close:
            self._leave(consumer)
        self.close_quietly(consumer)

    def _leave(self, consumer: Any) -> None:
        """A static member leaves the group only by unsubscribing before ``close()``:
        librdkafka sends no LeaveGroup for one that closes (kafka/membership.py). The
        revocation this brings is served here (its commit finds nothing left to send),
        and the leave goes once the assignment is empty, within ``revoke_timeout``; past
        that the close goes on, and the partitions wait for the session timeout."""
        try:
            consumer.unsubscribe()
        except (KafkaException, RuntimeError) as exc:
            self.log.warning("%s: leaving the group failed: %s", self.s.consumer_group, exc)
            return
        deadline = time.monotonic() + self.s.revoke_timeout
        while consumer.assignment() and time.monotonic() < deadline:
            # Nothing read now is handled: the next owner reads it from the commit.
            consumer.consume(num_messages=self.s.batch_size, timeout=LEAVE_POLL_S)

    def _final_commit(self, consumer: Any) -> None:
        """Commit the resolved prefix of every owned partition, through a rebalance.

        A member stopping while another joins or leaves (routine when scaling) sees its
        final commit refused with the old generation. Giving up there would hand the next
        owner messages every watcher already handled (guarantee 7) and send their dead
        letters again. Instead the consumer, paused so it fetches nothing more, serves the
        rebalance (the revoke callback commits what moves away) and the commit is retried
        with the new generation, within ``revoke_timeout``.
        """
        deadline = time.monotonic() + self.s.revoke_timeout
        while True:
            try:
                self.commit(consumer, synchronous=True)
                return
            except KafkaException as exc:
                remaining = deadline - time.monotonic()
                if exc.args[0].code() not in REBALANCE_ERRORS or remaining <= 0:
                    self.log.warning("%s: final commit failed: %s", self.s.consumer_group, exc)
                    return
            self.set_paused(consumer, PauseReason.CLOSING)
            # Nothing fetched now would be handled: the next owner reads it again.
            consumer.consume(num_messages=self.s.batch_size,
                             timeout=min(self.s.consume_timeout, remaining))


def _revoke_failed(c: AdapterCounters, n: int) -> None:
    c.revoke_commit_failures += n


def _names(partitions: list[TopicPartition]) -> str:
    return ", ".join(f"{tp.topic}[{tp.partition}]" for tp in partitions) or "nothing"

"""The unit of work: what is committed together for the messages the watchers handled.

One room for the transaction that makes a message's outcome durable: its events, the
state its watchers staged, and the holds that let a watcher move past a failing
message, in one database transaction per batch of windows, and only then acknowledged
so that Kafka may commit past them. :mod:`sharedstream.uow.transaction` states what goes
in, in which order, and what a crash between the steps leaves behind.

* ``sink.py``: ``DatabaseWorkSink``, the windows' queue, batching (group commit),
  retries and the isolation of a window the database refuses;
* ``transaction.py``: one batch's transaction;
* ``batchmerge.py``: the windows' staged state folded into one, in window order;
* ``eventrows.py``, ``windowrows.py``: event payloads encoded and made rows;
  ``eventcopy.py``: a large batch's events by ``COPY``;
* ``writerconn.py``: the writer thread's own connection;
* ``holdstore.py``: the holds read back when partitions are assigned;
* ``rejections.py``: rejections without a dead-letter topic, as rows (their own
  transaction, before the offset moves past them).

The triggerer (``triggerer/process.py``) builds the sink and hands it windows;
:mod:`sharedstream.statestore` stays the stores: its ``UnitOfWork``
(``statestore/uow.py``) stages state writes for a caller's transaction, and this room
is that caller.
"""

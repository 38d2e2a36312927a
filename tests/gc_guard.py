"""Find Kafka clients that only the cyclic garbage collector could destroy.

librdkafka aborts the process when a client is destroyed on one of its own
threads, and an admin request's future runs Python on such a thread: any
collection it triggers frees the cyclic garbage present at that moment. A live
(unclosed) client in cyclic garbage is therefore a crash waiting for a thread.
CI lost a whole run to one (``Fatal Python error: Aborted`` while
"Garbage-collecting" in ``_make_consumer_groups_result``).
"""

from __future__ import annotations

import gc

from confluent_kafka import cimpl


def _live(client: object) -> bool:
    """Closed consumers have already destroyed their handle: freeing them is harmless."""
    if isinstance(client, cimpl.Consumer):
        try:
            client.assignment()
        except RuntimeError:
            return False
    return True


def kafka_clients_in_cyclic_garbage() -> list[str]:
    """Type names of the live Kafka clients held only by reference cycles.

    Collects on the calling thread, so what it finds is then destroyed there, safely.
    What survives is frozen (``gc.freeze``): the next call scans only what was made
    since, which is what a check after each test needs (a full collection over the
    whole suite's objects cost about 0.2 s a test). Frozen objects are never
    collected again, so they cannot be freed on a librdkafka thread either.
    """
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        found = [type(o).__name__ for o in gc.garbage
                 if isinstance(o, (cimpl.Consumer, cimpl.Producer, cimpl._AdminClientImpl))
                 and _live(o)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    gc.collect()
    gc.freeze()
    return found

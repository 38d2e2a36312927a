"""The public names (docs/watchers.md) are a contract: outside acceptance tests use them."""

from __future__ import annotations


def test_public_names_importable_from_the_package() -> None:
    from sharedstream import (  # noqa: F401
        NEVER_EXPIRE,
        Asset,
        AssetWatcher,
        BaseEventTrigger,
        KafkaMessage,
        KafkaSharedStreamTrigger,
        MessageBatch,
        TriggerEvent,
        reject_shared_stream_event,
    )
    from sharedstream.statestore import NEVER_EXPIRE as store_never_expire
    from sharedstream.statestore import AssetScope, StateStore, TaskScope  # noqa: F401

    assert NEVER_EXPIRE is store_never_expire
    from sharedstream.triggers import MessageBatch as triggers_batch
    assert MessageBatch is triggers_batch
    from sharedstream.ops.dlq import (  # noqa: F401
        DeadLetter,
        DeadLetterError,
        DeadLetterReader,
        read_dead_letters,
    )

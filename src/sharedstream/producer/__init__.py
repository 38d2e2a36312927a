"""Broker side: the producer contract and its Kafka implementation."""

from sharedstream.producer.contract import (
    AdvanceItem,
    AdvanceOutcome,
    ForgetLanes,
    SharedStreamProducer,
    StreamItem,
)

__all__ = ["AdvanceItem", "AdvanceOutcome", "ForgetLanes", "SharedStreamProducer", "StreamItem"]

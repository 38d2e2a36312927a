"""Broker side: the producer contract and its Kafka implementation."""

from sharedstream.producer.contract import AdvanceItem, AdvanceOutcome, SharedStreamProducer

__all__ = ["AdvanceItem", "AdvanceOutcome", "SharedStreamProducer"]

"""Broker side: the Kafka adapter (its contract is ``sharedstream.core.contract``)."""

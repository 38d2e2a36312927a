"""sharedstream: a standalone event triggerer for Kafka with one shared consumer per topic set."""

__version__ = "0.1.0"

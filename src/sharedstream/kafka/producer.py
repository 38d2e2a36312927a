"""``KafkaSharedStreamProducer``: the public name of the Kafka adapter, a consumer.

The name comes from Airflow's triggerer API, where the broker side of a shared stream
is its "producer"; the class is :class:`~sharedstream.kafka.consumer.KafkaSharedConsumer`
(kafka/consumer.py lists its parts). Both names stay importable from here.
"""

from __future__ import annotations

from sharedstream.core.contract import AdapterHealth
from sharedstream.kafka.consumer import TOPIC_ID_CHECK_S, KafkaSharedConsumer, StreamFailedError
from sharedstream.kafka.handoff import StreamNotOpenError

KafkaSharedStreamProducer = KafkaSharedConsumer
ProducerHealth = AdapterHealth

__all__ = ["TOPIC_ID_CHECK_S", "KafkaSharedConsumer", "KafkaSharedStreamProducer",
           "ProducerHealth", "StreamFailedError", "StreamNotOpenError"]

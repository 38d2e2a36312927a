"""A watcher module as an Airflow user writes it, only the imports changed.

``Asset(uri=...)`` in Airflow's Kafka form, and the Kafka provider's way of turning
messages into events: an ``apply_function`` named by its dotted path, which receives
the message as ``confluent_kafka.Message`` shows it (``message.value()``).
"""

import json
import os

from sharedstream import Asset, AssetWatcher, KafkaMessageTrigger

TOPIC = os.environ["E2E_TOPIC"]


def paid_orders(message, minimum):
    """The provider's contract: return the event, or None for no event."""
    order = json.loads(message.value())
    if order["id"] % 2 == 0 and order["id"] >= minimum:
        return {"id": order["id"], "topic": message.topic(), "offset": message.offset()}
    return None


trigger = KafkaMessageTrigger(topics=[TOPIC], apply_function="airflow_style.paid_orders",
                              apply_function_args=[10], kafka_config_id="e2e")
orders = Asset(uri=f"kafka://127.0.0.1:9092/{TOPIC}",
               watchers=[AssetWatcher(name="paid_orders", trigger=trigger)])

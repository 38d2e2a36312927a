"""Cross-instance asset sync through Kafka: Airflow -> Kafka publisher, Kafka -> Airflow sink.

N Airflow instances each publish their asset events to one topic
(``sharedstream publish-airflow``) and each receive the others' through an
:class:`~sharedstream.airflowbridge.sink.AirflowAssetSinkTrigger`: 2N streams
instead of N*(N-1) point-to-point API calls. Needs the ``airflow`` extra (httpx).
"""

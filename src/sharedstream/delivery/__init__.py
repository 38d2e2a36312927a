"""Where persisted asset events go: destinations, their cursors, and the follow API.

A destination (``[destinations.<id>]``: Airflow, a webhook, a Kafka topic) reads the
``asset_event`` table by its own cursor, in commit order, and advances the cursor only
once the destination acknowledged (see :mod:`sharedstream.delivery.deliverer`).
:func:`~sharedstream.delivery.follow.follow` reads the same order from a cursor the
caller keeps.
"""

"""``sharedstream demo``: the triggerer on an in-process Kafka and SQLite, nothing to install.

``watchers`` is the example watcher module, ``traffic`` the sample orders,
``observe`` reads what landed (database, broker, dead-letter topic), ``view``
shows it, ``run`` wires everything together.
"""

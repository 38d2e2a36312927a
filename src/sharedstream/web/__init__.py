"""``sharedstream web``: a read-only console and REST API over every running triggerer.

One process serves any number of triggerers. It reads the database (the
``triggerer_process`` heartbeat rows, events, state, rejections, delivery cursors),
Kafka (committed offsets and log ends per group, dead-letter topics) and each live
triggerer's ``GET /status``; it writes nothing anywhere.

The room sits above ``ops`` (it reuses the offsets and dead-letter logic of the
commands) and below ``cli``. Nothing in this package imports FastAPI, uvicorn or Jinja2
at import time except ``app``, ``api``, ``pages`` and ``schemas``: ``command`` loads
them when the command runs, so a missing ``web`` extra is one ``error:`` line.
"""

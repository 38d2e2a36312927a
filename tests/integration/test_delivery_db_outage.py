"""A deliverer through a database outage (issue 25: nothing fails silently).

The database refusing the delivery's statements is infrastructure: the deliverer holds
its cursor, says it is failing (what readiness reads) and retries, and once the
database answers again it delivers every event exactly where it left off. Before, the
first refused statement ended the deliverer's task: delivery stopped for good while
ingestion went on, and nothing but a log line said so.

The fault is PostgreSQL's own: a statement trigger on ``delivery_cursor`` raises a
serialization failure (SQLSTATE 40001) while a row sits in ``fault_on``.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import sqlalchemy as sa
from test_delivery_backoff import add_events, store  # noqa: F401 (the fixture)

from sharedstream.delivery.deliverer import Deliverer
from sharedstream.delivery.settings import CommonOptions, DestinationSettings, WebhookDestination
from sharedstream.delivery.webhook import WebhookSender
from sharedstream.statestore.store import StateStore
from webhook_server import WebhookServer

FAULT_SQL = """
CREATE TABLE fault_on (id int);
CREATE SEQUENCE injected_faults;
CREATE FUNCTION inject_fault() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM fault_on) THEN
        PERFORM nextval('injected_faults');
        RAISE EXCEPTION 'injected delivery fault' USING ERRCODE = '40001';
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER inject_fault BEFORE INSERT OR UPDATE ON delivery_cursor
    FOR EACH STATEMENT EXECUTE FUNCTION inject_fault();
INSERT INTO fault_on VALUES (1);
"""


async def test_a_database_outage_holds_the_deliverer_then_it_delivers_everything(
        store: StateStore) -> None:  # noqa: F811
    count = 20
    ids = add_events(store, count)
    with store.engine.begin() as db:
        db.exec_driver_sql(FAULT_SQL)

    def faults() -> int:
        with store.engine.connect() as db:
            return int(db.exec_driver_sql(
                "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM injected_faults"
            ).scalar_one())

    with WebhookServer(lambda _doc, _n: 200) as server:
        options = WebhookDestination(url=server.url, secret="s")
        dest = DestinationSettings("hooks", CommonOptions(
            kind="webhook", start="earliest", retry_initial=0.02, retry_max=0.1), options)
        executor = ThreadPoolExecutor(1)
        stop = asyncio.Event()
        deliverer = Deliverer(dest, WebhookSender(options), store.engine, executor,
                              asyncio.Event(), owner="me")
        task = asyncio.create_task(deliverer.run(stop))
        try:
            async with asyncio.timeout(60):
                # The fault landed, more than once, and the deliverer is still there,
                # saying it is failing: what /readyz names.
                while await asyncio.to_thread(faults) < 3:
                    assert not task.done(), task.exception()
                    await asyncio.sleep(0.01)
                assert not task.done(), task.exception()
                assert deliverer.state.failing_since is not None
                assert "injected delivery fault" in (deliverer.state.last_error or "")
                with store.engine.begin() as db:
                    db.execute(sa.text("DELETE FROM fault_on"))
                while len(server.acked()) < count:
                    assert not task.done(), task.exception()
                    await asyncio.sleep(0.01)
                while deliverer.state.cursor != ids[-1]:  # noqa: ASYNC110
                    await asyncio.sleep(0.01)
        finally:
            stop.set()
            await task
            await deliverer.sender.aclose()
            executor.shutdown()
    assert Counter(r.document["id"] for r in server.acked()) == Counter(ids)
    assert deliverer.state.failing_since is None and deliverer.state.last_error is None
    assert deliverer.state.failures["database"] >= 3

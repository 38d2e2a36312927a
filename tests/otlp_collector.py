"""The ``otlp_collector`` fixture: a real OpenTelemetry Collector for the tracing tests.

It is the project's own collector build (``tools/otelcol``, see
``localservices.otelcol``): ``.endpoint`` is its OTLP/HTTP base URL and ``.spans()``
what it wrote. One collector serves the session, so a test picks its own spans out by
trace id (``spans(trace_id)``). A failed build or start fails the test that asked for
it, with the build's or the collector's own output; it never skips.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from localservices.otelcol import OtlpCollector

from session_services import start_or_fail


@pytest.fixture(scope="session")
def otlp_collector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OtlpCollector]:
    collector = OtlpCollector(tmp_path_factory.mktemp("otelcol"))
    start_or_fail(collector.start, collector.stop, "the OTLP collector (tools/otelcol)")
    yield collector
    collector.stop()

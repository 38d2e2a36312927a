# The sharedstream triggerer: docker build -t sharedstream .
#
#   docker run --rm -it sharedstream                  # the demo: no services needed
#   docker run --rm sharedstream run /app/examples/orders_watchers.py \
#       --config /app/examples/sharedstream.toml      # needs Kafka and a database
#
# docker-compose.yml builds it for the triggerer and the sample producer. The image
# holds the installed package (with the PostgreSQL driver and the tracing extra, off
# until OTEL_TRACES_EXPORTER is set: docs/tracing.md) and examples/ in /app;
# it runs as the unprivileged user "sharedstream" (uid 10001).

# A wheel built from this checkout, in a stage of its own: no sources or build
# leftovers in the final image.
FROM python:3.11-slim AS wheel
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /build
COPY pyproject.toml README.md LICENSE ./
COPY src ./src
RUN pip wheel --no-deps --wheel-dir /wheels .

FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN groupadd --system --gid 10001 sharedstream \
    && useradd --system --uid 10001 --gid sharedstream --home-dir /home/sharedstream \
        --create-home --shell /usr/sbin/nologin sharedstream
COPY --from=wheel /wheels /wheels
# The glob and the extra are two steps: "[postgres]" would be read as a glob pattern.
RUN set -- /wheels/sharedstream-*.whl \
    && pip install "$1[postgres,tracing]" \
    && rm -rf /wheels
WORKDIR /app
COPY examples ./examples
USER sharedstream
# The health server's port in docker-compose.yml (/livez, /readyz, /metrics).
EXPOSE 8794
ENTRYPOINT ["sharedstream"]
CMD ["demo"]

# entrepot container images.
#   docker build -t entrepot .                       the gateway (default target)
#   docker build --target spark -t entrepot-spark .   + Java 17 and PySpark for spark-ingest/report
# Both run as a non-root user; the gateway keeps its data in the /var/lib/entrepot volume.

# Both stages start from one pinned base: a patch release of Python on a named Debian release
# (a rebuild takes that tag's newest Debian security updates, nothing else changes).
ARG BASE=python:3.11.14-slim-bookworm

FROM ${BASE} AS build
# gcc builds the store's C placing loop (store/_placing.c) and the SRMP parsing modules mypyc
# compiles (setup.py); only the build stage has it.
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY gateway gateway
COPY store store
COPY mapping mapping
RUN python -m venv /opt/venv && /opt/venv/bin/pip install --no-cache-dir .

FROM build AS build-spark
RUN /opt/venv/bin/pip install --no-cache-dir ".[spark]"

FROM ${BASE} AS base
RUN useradd --system --uid 10001 --home-dir /var/lib/entrepot entrepot \
    && mkdir -p /var/lib/entrepot /etc/entrepot && chown entrepot /var/lib/entrepot
COPY config/mapping /etc/entrepot/mapping
# The image's configuration: listen on 0.0.0.0:8080 inside the container, the rest built-in.
COPY config/container.toml /etc/entrepot/entrepot.toml
WORKDIR /etc/entrepot
ENV ENTREPOT_CONFIG=/etc/entrepot/entrepot.toml

# spark-ingest / spark-report with a local Spark, or a driver for a cluster (--master spark://).
FROM base AS spark
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build-spark /opt/venv /opt/venv
ENV PYSPARK_PYTHON=/opt/venv/bin/python
USER entrepot
ENTRYPOINT ["/opt/venv/bin/entrepot"]
CMD ["spark-ingest", "--help"]

# The gateway (the default: the last stage). It listens where /etc/entrepot/entrepot.toml
# says (the image's: plain HTTP on 0.0.0.0:8080) and the health check asks /readyz there.
# Without credentials anyone who reaches it may send and receive, and management (queues,
# links, /ui, /v1/admin, /metrics) answers only inside the container. Give it an admin key
# (and partners, and TLS on another port if you like) in a config file of your own, mounted
# over the image's:
#   docker run --rm entrepot auth hash-key 'a long random key'    # prints its SHA-256
#   # [auth] admin_key_sha256 = "<that SHA-256>" in ./entrepot.toml, then:
#   docker run -p 8080:8080 -v entrepot-data:/var/lib/entrepot \
#       -v "$PWD/entrepot.toml:/etc/entrepot/entrepot.toml:ro" entrepot
FROM base AS gateway
COPY --from=build /opt/venv /opt/venv
USER entrepot
VOLUME ["/var/lib/entrepot"]
EXPOSE 8080
# `entrepot health` reads the same configuration as serve: http or https, the configured port.
HEALTHCHECK --interval=10s --timeout=10s --start-period=30s \
    CMD ["/opt/venv/bin/entrepot", "health"]
ENTRYPOINT ["/opt/venv/bin/entrepot"]
CMD ["serve", "--data-dir", "/var/lib/entrepot", "--mapping-dir", "/etc/entrepot/mapping"]

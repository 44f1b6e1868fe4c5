# syntax=docker/dockerfile:1
#
# binlog-relay: a MySQL/MariaDB binlog server.
#
#   docker build -t binlog-relay:0.1.0 .
#   docker run -d --name relay \
#     -v relay-data:/var/lib/binlog-relay \
#     -v "$PWD/relay.yaml:/etc/binlog-relay/config.yaml:ro" \
#     -e BINLOG_RELAY_UPSTREAM_PASSWORD=... \
#     -p 3306:3306 -p 9104:9104 binlog-relay:0.1.0
#
# The configuration is a mounted file (/etc/binlog-relay/config.yaml, see config/example.yaml);
# any scalar key can be overridden with BINLOG_RELAY_<PATH> variables. Its data_dir should be
# /var/lib/binlog-relay (the volume) and metrics must stay enabled on port 9104 for HEALTHCHECK.
#
# Two stages: the build stage installs the package and its dependencies into a virtualenv, the
# runtime stage copies only that virtualenv, so the image holds neither the source nor pip's
# build leftovers. Both stages use the same base image, which the venv's python links to.

ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1

RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

# gcc builds the relay's C modules (setup.py: relay/binlog/_scan.c, the compiled loops;
# relay/rows/coltypes/_rowread.c and relay/pipeline/_jsontext.c, the export's row reading
# and JSON text); it stays in this stage, the runtime stage gets only the built modules.
# Versions follow the pinned base image.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /src
# Dependencies are pinned by pyproject.toml's ranges; wheels exist for all of them.
COPY pyproject.toml setup.py README.md ./
COPY relay ./relay
# setup.py makes the C modules optional (pip installs without them when it cannot build):
# importing them here fails the image build instead of shipping a slower relay.
RUN pip install --no-cache-dir . \
    && python -c "import relay.binlog._scan, relay.rows.coltypes._rowread, relay.pipeline._jsontext" \
    && binlog-relay --version


FROM ${PYTHON_IMAGE}

LABEL org.opencontainers.image.title="binlog-relay" \
      org.opencontainers.image.description="MySQL/MariaDB binlog relay: replicates from a primary, stores its binlogs byte for byte, serves them to replicas" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.licenses="Apache-2.0"

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1

# A fixed, non-root uid/gid (10001) that Kubernetes' runAsUser/fsGroup can name.
# --no-log-init keeps useradd from writing a huge sparse /var/log/lastlog for the high uid.
RUN groupadd --system --gid 10001 relay \
    && useradd --system --no-log-init --uid 10001 --gid relay \
       --home-dir /var/lib/binlog-relay --no-create-home --shell /usr/sbin/nologin relay \
    && mkdir -p /var/lib/binlog-relay /etc/binlog-relay \
    && chown relay:relay /var/lib/binlog-relay \
    && chmod 0750 /var/lib/binlog-relay

COPY --from=build /opt/venv /opt/venv

USER 10001:10001
WORKDIR /var/lib/binlog-relay
VOLUME ["/var/lib/binlog-relay"]

# 3306: replicas (listen.port); 9104: Prometheus /metrics, /healthz, /readyz (metrics.port).
EXPOSE 3306 9104

# slim has no curl or wget: ask the metrics endpoint with the standard library.
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:9104/healthz', timeout=4).status == 200 else 1)"]

# SIGTERM (docker stop, Kubernetes) makes the relay stop cleanly within seconds.
STOPSIGNAL SIGTERM
ENTRYPOINT ["binlog-relay"]
CMD ["run", "--config", "/etc/binlog-relay/config.yaml"]

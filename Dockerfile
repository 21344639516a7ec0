# delayq node image: `docker run IMAGE` runs a node; `docker run IMAGE db init` or
# `docker run IMAGE demo ...` run the other `delayq` sub-commands.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

COPY . /app

# A regular install: the package `delayq` carries its migrations (delayq/sql) and IDL, so the
# node runs from site-packages and /app is only the build context.
RUN pip install --no-cache-dir .

# Run as an unprivileged user; /app stays owned by root, so the code is read-only to the node.
RUN useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin delayq
# Certificates and tokens (the compose stack's volume `delayq-secrets`), the node's to read only.
RUN mkdir -p /var/lib/delayq && chown delayq /var/lib/delayq && chmod 700 /var/lib/delayq
USER delayq

# Thrift port (DELAYQ_PORT's default).
EXPOSE 9090

# Exec form: `delayq` is PID 1 and gets SIGTERM itself, which the node handles by draining.
ENTRYPOINT ["delayq"]
CMD ["node"]

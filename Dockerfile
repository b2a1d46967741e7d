# entrepot container image: docker build -t entrepot . && docker run -p 8080:8080 entrepot
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gateway gateway
COPY store store
COPY mapping mapping
RUN python -m venv /opt/venv && /opt/venv/bin/pip install --no-cache-dir .

FROM python:3.11-slim
RUN useradd --system --uid 10001 --home-dir /var/lib/entrepot entrepot \
    && mkdir -p /var/lib/entrepot /etc/entrepot && chown entrepot /var/lib/entrepot
COPY --from=build /opt/venv /opt/venv
COPY config /etc/entrepot
WORKDIR /etc/entrepot
USER entrepot
VOLUME ["/var/lib/entrepot"]
EXPOSE 8080 8443
ENV ENTREPOT_CONFIG=/etc/entrepot/entrepot.toml
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s \
    CMD python -c "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8080/readyz', timeout=2).status != 200)"
ENTRYPOINT ["/opt/venv/bin/entrepot"]
CMD ["serve", "--listen", "0.0.0.0:8080", "--data-dir", "/var/lib/entrepot", "--mapping-dir", "/etc/entrepot/mapping"]

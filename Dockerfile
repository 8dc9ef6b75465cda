# syntax=docker/dockerfile:1
FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY vendor vendor
COPY src src
COPY migrations migrations
COPY openapi.yaml openapi.yaml
RUN cargo build --release --locked --bin memoryd

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /var/lib/memoryd --shell /usr/sbin/nologin memoryd \
 && mkdir -p /var/lib/memoryd \
 && chown memoryd /var/lib/memoryd
COPY --from=build /src/target/release/memoryd /usr/local/bin/memoryd
# Two malloc arenas: the binary sets the same itself, and this keeps it true
# for anything else the image runs.
ENV MEMORYD_LISTEN=0.0.0.0:8080 \
    MEMORYD_DATA_DIR=/var/lib/memoryd \
    MALLOC_ARENA_MAX=2
VOLUME /var/lib/memoryd
EXPOSE 8080
USER 10001
HEALTHCHECK --interval=10s --timeout=3s CMD curl -fsS http://127.0.0.1:8080/healthz || exit 1
ENTRYPOINT ["memoryd"]
CMD ["serve"]

FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
# The dependencies are a layer of their own, built against an empty memoryd:
# a change to memoryd's source rebuilds memoryd alone.
COPY Cargo.toml Cargo.lock build.rs ./
COPY vendor vendor
RUN mkdir -p src migrations \
 && echo 'fn main() {}' > src/main.rs \
 && touch src/lib.rs \
 && cargo build --release --locked --bin memoryd \
 && rm -rf src target/release/memoryd target/release/.fingerprint/memoryd-* \
    target/release/deps/memoryd-* target/release/deps/libmemoryd-*
COPY migrations migrations
COPY openapi.yaml openapi.yaml
COPY src src
RUN cargo build --release --locked --bin memoryd

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
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
# `memoryd health` asks where MEMORYD_LISTEN says the server listens, so a
# changed listen address stays healthy.
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s CMD ["memoryd", "health"]
ENTRYPOINT ["memoryd"]
CMD ["serve"]

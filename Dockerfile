# syntax=docker/dockerfile:1
# tokentap container image: a release build with the locked dependencies, on a distroless runtime
# (glibc, CA certificates for https upstreams, no shell, no package manager) as a non-root user.
#
#   docker build -t tokentap:0.1.0 .
#   docker run --rm -p 8080:8080 -p 9464:9464 tokentap:0.1.0 demo --listen 0.0.0.0:8080 --metrics-listen 0.0.0.0:9464
#   (the demo listens on loopback unless told: in a container, on the container's interfaces)
#   docker run --rm -p 8080:8080 -p 9464:9464 -v $PWD/tokentap.yaml:/etc/tokentap/tokentap.yaml:ro tokentap:0.1.0
#
# Config: /etc/tokentap/tokentap.yaml (the annotated config/tokentap.yaml is baked in as a
# default; mount yours over it). Ports: 8080 proxy, 9464 /metrics and /healthz.
# Tokenizers: the build has the default `tokenizer` feature; tokentap looks for served models'
# tokenizer.json in the HuggingFace hub cache, here /home/nonroot/.cache/huggingface/hub (the nonroot
# user's home): mount the model server's cache there read-only, or set HF_HOME / HF_HUB_CACHE, or list
# model directories under tokenizer_dirs in the config (docs/tokenizers.md).
# Health: the runtime image has no shell or curl, so there is no HEALTHCHECK instruction; probe
# GET /healthz on port 9464 from outside (Kubernetes httpGet probes: deploy/kubernetes/).

FROM rust:1.95-slim-bookworm AS build
# The default `jemalloc` feature builds jemalloc from C with make, which the slim image lacks.
RUN apt-get update \
    && apt-get install -y --no-install-recommends make=4.3-4.1 \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
# The cache mounts keep the registry and target/ between builds; the binary is copied out of them.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin tokentap \
    && cp target/release/tokentap /tokentap

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /tokentap /usr/local/bin/tokentap
COPY config/tokentap.yaml /etc/tokentap/tokentap.yaml
# distroless' nonroot user (uid/gid 65532); Kubernetes manifests set the same ids.
USER 65532:65532
EXPOSE 8080 9464
ENTRYPOINT ["/usr/local/bin/tokentap"]
CMD ["--config", "/etc/tokentap/tokentap.yaml"]

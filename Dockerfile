# The gpu-autoscaler image: the release binary on a distroless base, run as uid/gid 65532 (the
# chart's securityContext) with a read-only root filesystem. Build from the repository root:
#   docker build -t ghcr.io/gpu-autoscaler/gpu-autoscaler:0.1.0 .     (or: podman build ...)
# autoscaler/tests/deploy.rs checks that the user, entrypoint and port agree with the chart.

# Build stage: the toolchain the repository is tested with (rust-version in Cargo.toml). The
# cloud providers are cargo features (off for a plain `cargo run`); the image carries both, and
# .ci/run runs this very cargo command.
FROM docker.io/library/rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
# The dependency cache and target folder live in build-time cache mounts, so a rebuild after a
# source change only compiles the workspace.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p autoscaler --features aws,gcp --bin gpu-autoscaler \
    && install -D -m 0755 target/release/gpu-autoscaler /out/gpu-autoscaler

# Runtime stage: glibc and CA certificates only, no shell, no package manager.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/gpu-autoscaler /usr/local/bin/gpu-autoscaler
USER 65532:65532
EXPOSE 8080/tcp
ENTRYPOINT ["/usr/local/bin/gpu-autoscaler"]
CMD ["run"]

# The image of cheiron with a container engine: `docker build --build-arg VERSION=<version> -t
# ghcr.io/anny-co/cheiron:<version> .` (docs/image.md). scripts/image builds the same image
# without one; both lay out the files with `scripts/image --rootfs`, so the paths, the static
# binaries, /etc/passwd and the config below are the same (tests/image.rs checks scripts/image's).

# glibc >= 2.34 (bookworm: 2.36) has the files and dns name services built in, which a static
# binary needs to resolve names without shared NSS modules.
FROM docker.io/library/rust:1.95-bookworm AS build
WORKDIR /src
ARG VERSION
RUN test -n "$VERSION" || { echo "pass --build-arg VERSION=<the version in Cargo.toml>" >&2; exit 1; }
COPY . .
# Static (+crt-static) release binaries of cheiron and cheiron-certs and the image's files in
# /rootfs: /usr/local/bin/{cheiron,cheiron-certs}, /etc/{passwd,group,nsswitch.conf},
# /etc/ssl/certs/ca-certificates.crt (the builder's ca-certificates), /tmp, /home/nonroot.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    scripts/image --rootfs /rootfs
# A VERSION that is not the crate's would mislabel the image.
RUN /rootfs/usr/local/bin/cheiron --version | grep -qx "cheiron $VERSION" || \
    { echo "VERSION=$VERSION but $(/rootfs/usr/local/bin/cheiron --version)" >&2; exit 1; }

# No base image: the binaries need no libc and no shell (see docs/image.md).
FROM scratch
COPY --from=build /rootfs/ /
ARG VERSION
LABEL org.opencontainers.image.title="cheiron" \
      org.opencontainers.image.description="Distributes registry pull secrets to every Pod that should have them, at admission" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="https://github.com/anny-co/cheiron" \
      org.opencontainers.image.licenses="Apache-2.0"
# The chart and the plain manifests run the bare names `cheiron` and `cheiron-certs`.
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
USER 65532:65532
WORKDIR /
EXPOSE 8443/tcp 8080/tcp
ENTRYPOINT ["/usr/local/bin/cheiron"]

# pgfleet coordinator image.
#
#   docker build -t pgfleet .
#   docker run --rm -p 6432:6432 pgfleet serve --worker db1:5432 --user postgres:secret
#
# The binary is built with cgo (the SQL parser is C code), so the runtime
# stage is glibc-based Debian, the same release as the build stage.

FROM golang:1.26-bookworm AS build
# The official golang images pin GOTOOLCHAIN=local; allow fetching the exact
# toolchain go.mod asks for if this image is an older 1.26 patch release.
ENV GOTOOLCHAIN=auto
WORKDIR /src
# Dependencies first, so editing the source does not re-download modules.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=1 go build -trimpath -o /out/pgfleet ./cmd/pgfleet

FROM debian:bookworm-slim
RUN groupadd --system --gid 10001 pgfleet \
 && useradd --system --uid 10001 --gid pgfleet --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin pgfleet
COPY --from=build /out/pgfleet /usr/local/bin/pgfleet
USER 10001:10001
# Inside a container, listening on loopback (pgfleet's default) would make the
# published ports useless, so listen on all interfaces by default.
ENV PGFLEET_LISTEN=0.0.0.0:6432 \
    PGFLEET_METRICS_LISTEN=0.0.0.0:9187
EXPOSE 6432 9187
ENTRYPOINT ["/usr/local/bin/pgfleet"]
CMD ["serve"]

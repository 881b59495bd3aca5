# syntax=docker/dockerfile:1
# One image with the flashgate commands (ledger, proxy, loadtest, flashgatectl) as
# static binaries; docker-compose.yml runs `ledger` and `proxy` from it.

FROM golang:1.26 AS build
WORKDIR /src
# Modules first, so that a source change does not download them again.
COPY go.mod go.sum ./
# kfake (the test broker that bin/loadtest also runs) is a patched copy: internal/kfake/PATCHED.md.
COPY internal/kfake ./internal/kfake
RUN go mod download
# Only what the binaries are built from (bin/ holds local builds).
COPY ledger ./ledger
COPY proxy ./proxy
COPY loadtest ./loadtest
COPY flashgatectl ./flashgatectl
COPY shared ./shared
COPY migrations ./migrations
ENV CGO_ENABLED=0 GOFLAGS=-trimpath
# No .git in the build context: the version and revision come in as build args
# (docker build --build-arg VERSION=$(git describe) --build-arg REVISION=$(git rev-parse HEAD)).
ARG VERSION=dev
ARG REVISION=unknown
ARG BUILDINFO=github.com/flashgate/flashgate/shared/buildinfo
RUN go build -ldflags="-s -w -X ${BUILDINFO}.version=${VERSION} -X ${BUILDINFO}.revision=${REVISION}" -o /out/ledger ./ledger \
 && go build -ldflags="-s -w -X ${BUILDINFO}.version=${VERSION} -X ${BUILDINFO}.revision=${REVISION}" -o /out/proxy ./proxy \
 && go build -ldflags="-s -w -X ${BUILDINFO}.version=${VERSION} -X ${BUILDINFO}.revision=${REVISION}" -o /out/loadtest ./loadtest \
 && go build -ldflags="-s -w -X ${BUILDINFO}.version=${VERSION} -X ${BUILDINFO}.revision=${REVISION}" -o /out/flashgatectl ./flashgatectl

# Alpine rather than distroless: busybox wget serves the compose health checks.
FROM alpine:3.21
RUN apk add --no-cache ca-certificates tzdata \
 && addgroup -S -g 10001 flashgate \
 && adduser -S -D -H -u 10001 -G flashgate flashgate
COPY --from=build /out/ledger /out/proxy /out/loadtest /out/flashgatectl /usr/local/bin/
USER 10001:10001
EXPOSE 8080 8081
# The command names the service: `ledger`, `proxy`, `loadtest <command>` or
# `flashgatectl <command>` (an operator's shell: docker compose exec ledger flashgatectl ...).
CMD ["proxy"]

# Airlock worker, CLIs, HTTP API and MCP server. The worker runs as root
# inside the container: it needs root to give each slot its own uid,
# namespaces and tmpfs workspaces; the steps themselves never run as root
# (see docs/isolation.md#isolation-tiers). docker-compose.yml runs the api
# and mcp services from this image too (entrypoint /usr/local/bin/api, mcp).
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# Every command (worker, enqueue, approve, api, mcp, and any later one under
# cmd/) but the benchmark, into /out/. airlock_nodev leaves the worker's dev
# mode out (no embedded Redis, no demo: nothing of examples/ is linked in);
# worker -dev says so. -trimpath and -ldflags "-s -w" (no symbol table, no
# DWARF) make the binaries smaller and free of build paths; panics still
# print their stack traces (docs/deployment.md gives the sizes).
RUN CGO_ENABLED=0 go build -tags airlock_nodev -trimpath -ldflags "-s -w" -o /out/ $(go list ./cmd/... | grep -v '/cmd/bench$')

FROM debian:bookworm-slim
# What steps may call: a shell and coreutils come with the image; add the
# interpreters your actions need (python3, nodejs...) here. bash also runs
# the compose healthcheck (GET /readyz over /dev/tcp: no curl needed).
RUN apt-get update && apt-get install -y --no-install-recommends bash coreutils ca-certificates && \
    rm -rf /var/lib/apt/lists/*
COPY --from=build /out/ /usr/local/bin/
# Workspaces (scratch) and the store of promoted outputs (keep it).
VOLUME ["/var/lib/airlock", "/var/lib/airlock-store"]
ENTRYPOINT ["/usr/local/bin/worker"]
CMD ["-store", "/var/lib/airlock-store"]

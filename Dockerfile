# Airlock worker and CLIs. The worker runs as root inside the container: it
# needs root to give each slot its own uid, namespaces and tmpfs workspaces;
# the steps themselves never run as root (see README, "Isolation tiers").
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/worker ./cmd/worker && \
    CGO_ENABLED=0 go build -trimpath -o /out/enqueue ./cmd/enqueue

FROM debian:bookworm-slim
# What steps may call: a shell and coreutils come with the image; add the
# interpreters your actions need (python3, nodejs...) here.
RUN apt-get update && apt-get install -y --no-install-recommends bash coreutils ca-certificates && \
    rm -rf /var/lib/apt/lists/*
COPY --from=build /out/worker /out/enqueue /usr/local/bin/
VOLUME ["/var/lib/airlock"]
ENTRYPOINT ["/usr/local/bin/worker"]

// Command api serves Airlock's HTTP JSON API (package httpapi) for
// backends in any language and for approvers:
//
//	api -tokens FILE [-addr 127.0.0.1:8080] [-redis URL] [-tls-cert F -tls-key F]
//
//	POST /v1/runs                          enqueue a spec (Idempotency-Key header)
//	GET  /v1/runs/{task_id}[?wait=30s&until=done|final]   the run record, or a long poll
//	GET  /v1/runs/{task_id}/events         its state changes, as Server-Sent Events
//	GET  /v1/runs/{task_id}/result         its promoted result and manifest
//	GET  /v1/approvals[/{id}]              for approvers: list, show
//	POST /v1/approvals/{id}/accept|reject  for approvers: decide
//	GET  /openapi.json, /spec.schema.json, /healthz
//
// Bearer tokens come from the -tokens file, one per line: NAME
// SCOPE[,SCOPE...] TOKEN, TOKEN being sha256:HEX (api -hash-token prints
// it) or the token itself. It exits 0 after a clean shutdown (SIGINT,
// SIGTERM), 2 on bad flags or a bad token file, 1 on any other error. See
// api -h and docs/http-api.md.
package main

import "github.com/airlock-run/airlock/internal/cli"

func main() { cli.Main(Run) }

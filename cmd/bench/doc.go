// Command bench measures Airlock against one Redis: the throughput of its
// worker next to a bare asynq server running the same argv unconfined, idle
// latency, a per-task overhead breakdown, the worker's memory over many
// tasks, listing pending approvals, the HTTP API's cost over the Go
// client (-only api), and what one run costs Redis (-only redis, on a
// redis-server of its own). See BENCHMARKS.md.
//
//	go run ./cmd/bench -redis redis://127.0.0.1:6379/9
//	go run ./cmd/bench -n 50 -json
package main

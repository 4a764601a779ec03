// Package bench is Airlock's benchmark harness: it measures, against one
// Redis, what confinement costs compared with a bare asynq server that runs
// the same argv unconfined.
//
// Both servers run as separate processes — this binary re-executed with a
// hidden subcommand (ChildArgWorker, ChildArgBaseline) — so that their
// resident memory can be read from /proc and neither shares a heap or a
// scheduler with the producer. A binary that uses this package must call
// sandbox.MaybeHelper and then MaybeChild at the top of main (a test binary:
// in TestMain), because slot helpers and servers are that binary re-executed.
//
// Figures, each the median of interleaved rounds with min and max:
//
//   - throughput (tasks/s) of the baseline and of Airlock's worker for three
//     workloads at two concurrencies, and their ratio;
//   - idle latency, enqueue to Wait's return, p50/p90/p99;
//   - a per-task overhead breakdown measured directly with the packages;
//   - the worker's RSS before and after many trivial tasks;
//   - the time to list 10,000 pending approvals;
//   - the HTTP API's cost over the Go client, with the api binary: enqueue
//     to record p50 of both, and GET /v1/runs/{id} answered per second;
//   - what one run costs Redis (-only redis), on a private redis-server:
//     commands executed and sent, command µs and CPU per run for bare
//     asynq and Airlock's paths, and which process sends which command;
//   - the ceiling of one Redis for a fleet (-only ceiling): runs/s of a
//     fleet of workers on a private redis-server, then on a private 3-shard
//     Redis Cluster, Redis's CPU and commands per second, and the runs/s
//     one Redis core would sustain.
//
// It builds on Linux only; elsewhere the package is empty.
package bench

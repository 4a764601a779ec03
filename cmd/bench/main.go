// Command bench measures Airlock against one Redis: the throughput of its
// worker next to a bare asynq server running the same argv unconfined, idle
// latency, a per-task overhead breakdown, the worker's memory over many
// tasks, and listing pending approvals. See BENCHMARKS.md.
//
//	go run ./cmd/bench -redis redis://127.0.0.1:6379/9
//	go run ./cmd/bench -n 50 -json
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/airlock-run/airlock/bench"
	"github.com/airlock-run/airlock/contract"
	"github.com/airlock-run/airlock/internal/sandbox"
)

func main() {
	sandbox.MaybeHelper()     // a slot helper is this binary re-executed
	contract.MaybeValidator() // so is a validation child
	bench.MaybeChild()        // so are the worker and baseline servers it measures
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := bench.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

//go:build linux

package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/airlock-run/airlock/bench"
	"github.com/airlock-run/airlock/contract"
	"github.com/airlock-run/airlock/internal/redislog"
	"github.com/airlock-run/airlock/internal/sandbox"
)

func main() {
	sandbox.MaybeHelper()     // a slot helper is this binary re-executed
	contract.MaybeValidator() // so is a validation child
	bench.MaybeChild()        // so are the worker and baseline servers it measures
	redislog.Discard()        // go-redis's own pool lines: bench reports errors itself
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := bench.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

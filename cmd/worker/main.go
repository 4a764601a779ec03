// Command worker runs Airlock's worker: it takes task specs off Redis
// (asynq), runs their steps confined in fresh workspaces and stores a run
// record per task. See the README for flags and isolation tiers.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/airlock-run/airlock/contract"
	"github.com/airlock-run/airlock/internal/sandbox"
)

func main() {
	sandbox.MaybeHelper()     // a slot helper is this binary re-executed
	contract.MaybeValidator() // so is a validation child
	// A closed stdout or stderr (worker | head) must not end the worker:
	// with SIGPIPE caught, a write to it fails with EPIPE instead (and the
	// logger drops the line).
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := Run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		msg := err.Error()
		if !strings.HasPrefix(msg, "worker:") {
			msg = "worker: " + msg
		}
		fmt.Fprintln(os.Stderr, msg)
		os.Exit(1)
	}
}

//go:build linux

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/airlock-run/airlock/contract"
	"github.com/airlock-run/airlock/internal/cli"
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
	err := Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		os.Exit(cli.ExitOK)
	case errors.Is(err, cli.ErrUsage):
		os.Exit(cli.ExitUsage) // said once by cli.Parse
	case err != nil:
		msg := err.Error()
		if !strings.HasPrefix(msg, "worker:") {
			msg = "worker: " + msg
		}
		fmt.Fprintln(os.Stderr, msg)
		os.Exit(cli.ExitError)
	}
}

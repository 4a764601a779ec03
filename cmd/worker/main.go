//go:build linux

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/airlock-run/airlock/contract"
	"github.com/airlock-run/airlock/internal/cli"
	"github.com/airlock-run/airlock/internal/isolation/sandbox"
)

func main() {
	sandbox.MaybeHelper()     // a slot helper is this binary re-executed
	contract.MaybeValidator() // so is a validation child
	// A closed stdout or stderr (worker | head) must not end the worker:
	// with SIGPIPE caught, a write to it fails with EPIPE instead (and the
	// logger drops the line).
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	cli.Main(func(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
		return exitCode(Run(ctx, args, stdout, stderr), stderr)
	})
}

// exitCode is the worker's exit status for Run's error, which it prints
// on stderr (once: cli.Parse has printed a bad flag already).
func exitCode(err error, stderr io.Writer) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return cli.ExitOK
	case errors.Is(err, cli.ErrUsage):
		return cli.ExitUsage
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "worker:") {
		msg = "worker: " + msg
	}
	fmt.Fprintln(stderr, msg)
	return cli.ExitError
}

//go:build linux

package main

import (
	"context"
	"io"

	"github.com/airlock-run/airlock/contract"
	"github.com/airlock-run/airlock/internal/bench"
	"github.com/airlock-run/airlock/internal/cli"
	"github.com/airlock-run/airlock/internal/isolation/sandbox"
)

func main() {
	sandbox.MaybeHelper()     // a slot helper is this binary re-executed
	contract.MaybeValidator() // so is a validation child
	bench.MaybeChild()        // so are the worker and baseline servers it measures
	// cli.Main drops go-redis's own pool lines: bench reports errors itself.
	cli.Main(func(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
		return bench.Main(ctx, args, stdout, stderr)
	})
}

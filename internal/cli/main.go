package cli

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/airlock-run/airlock/internal/redis/redislog"
)

// RunFunc is a command's Run: it runs the command with args (without the
// program name) until ctx ends and returns its exit code.
type RunFunc func(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int

// Main is a command's main: it drops go-redis's own log lines (a command
// reports its errors itself; one that logs routes them again with
// redislog.To), runs run with the process's arguments and standard
// streams under a context that SIGINT and SIGTERM end, and exits with the
// code run returns.
func Main(run RunFunc) {
	redislog.Discard()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

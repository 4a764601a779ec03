package redistest

import (
	"fmt"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"go.uber.org/goleak"
)

// Serve runs an asynq server for queue with handler h until t ends, in the
// shape of a worker but fast: it looks for new tasks every 10ms, retries a
// failed task after 10ms and logs through t. Register it after Queue (so
// that it is shut down before the queue is deleted).
func Serve(t testing.TB, queue string, h asynq.HandlerFunc) {
	t.Helper()
	c := Client(t)
	srv := asynq.NewServerFromRedisClient(c, asynq.Config{
		Queues:                   map[string]int{queue: 1},
		Concurrency:              2,
		TaskCheckInterval:        10 * time.Millisecond,
		DelayedTaskCheckInterval: 10 * time.Millisecond,
		RetryDelayFunc:           func(int, error, *asynq.Task) time.Duration { return 10 * time.Millisecond },
		ShutdownTimeout:          5 * time.Second,
		Logger:                   testLogger{t},
		LogLevel:                 asynq.WarnLevel,
	})
	if err := srv.Start(h); err != nil {
		t.Fatalf("redistest: starting the asynq server: %v", err)
	}
	t.Cleanup(srv.Shutdown) // runs before Client's Close: cleanups run last-in first-out
}

// testLogger sends asynq's log to the test log.
type testLogger struct{ t testing.TB }

func (l testLogger) log(level string, args ...any) {
	l.t.Helper()
	l.t.Logf("asynq %s: %s", level, fmt.Sprint(args...))
}

func (l testLogger) Debug(args ...any) { l.log("debug", args...) }
func (l testLogger) Info(args ...any)  { l.log("info", args...) }
func (l testLogger) Warn(args ...any)  { l.log("warn", args...) }
func (l testLogger) Error(args ...any) { l.log("error", args...) }
func (l testLogger) Fatal(args ...any) { l.log("fatal", args...) }

// GoleakOptions returns the options a TestMain passes to
// goleak.VerifyTestMain for the goroutines this package keeps on purpose:
// the accept loop of the embedded miniredis, which lives as long as the
// test binary. Nothing else is ignored.
func GoleakOptions() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("github.com/alicebob/miniredis/v2/server.(*Server).serve"),
	}
}

// Package redislog routes go-redis's own log lines (connection retries,
// pool errors), which it prints to the standard logger by default, away
// from the CLIs' output: the error a command returns already says it; and
// asynq's, into a server's zerolog logger (Asynq).
package redislog

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

type printer func(string)

func (p printer) Printf(_ context.Context, format string, v ...any) { p(fmt.Sprintf(format, v...)) }

// Discard drops go-redis's log lines.
func Discard() { redis.SetLogger(printer(func(string) {})) }

// To sends go-redis's log lines to l at debug level.
func To(l zerolog.Logger) {
	redis.SetLogger(printer(func(s string) { l.Debug().Str("from", "go-redis").Msg(s) }))
}

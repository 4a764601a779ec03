package redislog

import (
	"fmt"

	"github.com/hibiken/asynq"
	"github.com/rs/zerolog"
)

// Asynq is the logger of an asynq server (asynq.Config.Logger): asynq's
// own lines go to l at their level, marked from=asynq. Fatal is logged as
// an error and ends nothing: the server's owner decides when to stop.
func Asynq(l zerolog.Logger) asynq.Logger { return asynqLogger{l} }

type asynqLogger struct{ l zerolog.Logger }

func (a asynqLogger) Debug(args ...any) { a.l.Debug().Str("from", "asynq").Msg(fmt.Sprint(args...)) }
func (a asynqLogger) Info(args ...any)  { a.l.Info().Str("from", "asynq").Msg(fmt.Sprint(args...)) }
func (a asynqLogger) Warn(args ...any)  { a.l.Warn().Str("from", "asynq").Msg(fmt.Sprint(args...)) }
func (a asynqLogger) Error(args ...any) { a.l.Error().Str("from", "asynq").Msg(fmt.Sprint(args...)) }
func (a asynqLogger) Fatal(args ...any) { a.l.Error().Str("from", "asynq").Msg(fmt.Sprint(args...)) }

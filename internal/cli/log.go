package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/rs/zerolog"
)

// NewLogger is a command's logger for its -log-format (json or console)
// and -log-level (zerolog's names: debug, info, warn, error...) flags,
// writing to w with a timestamp on every line. An error names the flag.
func NewLogger(format, level string, w io.Writer) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil {
		return zerolog.Logger{}, fmt.Errorf("-log-level: %w", err)
	}
	switch format {
	case "json":
	case "console":
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}
	default:
		return zerolog.Logger{}, fmt.Errorf("-log-format: %q is not json or console", format)
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger(), nil
}

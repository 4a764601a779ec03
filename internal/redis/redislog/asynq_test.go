package redislog

import (
	"bytes"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

func TestAsynq(t *testing.T) {
	var b bytes.Buffer
	l := Asynq(zerolog.New(&b).Level(zerolog.InfoLevel))
	l.Debug("not kept")
	l.Info("lease ", 3, " extended")
	l.Fatal("broker down")
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	want := []string{
		`{"level":"info","from":"asynq","message":"lease 3 extended"}`,
		`{"level":"error","from":"asynq","message":"broker down"}`,
	}
	if len(lines) != len(want) || lines[0] != want[0] || lines[1] != want[1] {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

package redisconn

import (
	"context"
	"fmt"
	"net"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestUnreachable: a refused dial and a closed client are outages; what
// Redis answered, a context's end and a file's error are not.
func TestUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	refused := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer refused.Close()
	dialErr := refused.Ping(context.Background()).Err()
	closed := redis.NewClient(&redis.Options{Addr: addr})
	closed.Close()
	closedErr := closed.Ping(context.Background()).Err()
	_, fileErr := os.Open("/nonexistent/manifest.json")
	for name, tc := range map[string]struct {
		err  error
		want bool
	}{
		"refused dial":      {dialErr, true},
		"closed client":     {closedErr, true},
		"wrapped":           {fmt.Errorf("airlock: task t: %w", dialErr), true},
		"redis.Nil":         {redis.Nil, false},
		"a file's error":    {fileErr, false},
		"a context's end":   {context.Canceled, false},
		"no error":          {nil, false},
		"an answered error": {fmt.Errorf("ERR unknown command"), false},
	} {
		if got := Unreachable(tc.err); got != tc.want {
			t.Errorf("%s (%v): Unreachable = %v, want %v", name, tc.err, got, tc.want)
		}
	}
}

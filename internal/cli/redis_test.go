package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-run/airlock"
)

// closedPort is a loopback port nothing listens on: one just freed.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// pingErr is the error of a PING through r's URL.
func pingErr(t *testing.T, r *Redis) error {
	t.Helper()
	rdb, _, err := r.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = rdb.Ping(ctx).Err()
	if err == nil {
		t.Fatalf("PING %s answered", r.URL)
	}
	return err
}

// TestRedisErrorSaysURLAndSource: an error reaching Redis names the URL
// (password hidden) and where it came from, with a hint for the default
// and for a dev-mode file whose worker is gone; other errors are left as
// they are.
func TestRedisErrorSaysURLAndSource(t *testing.T) {
	addr := closedPort(t)
	for _, c := range []struct {
		name string
		r    *Redis
		want string // the whole message after the go-redis error
	}{
		{"flag", &Redis{URL: "redis://app:s3cret@" + addr + "/2", src: RedisSource{From: FromFlag}},
			"Redis redis://app:xxxxx@" + addr + "/2 (from -redis): dial tcp " + addr + ": connect: connection refused"},
		{"env", &Redis{URL: "redis://" + addr + "/0", src: RedisSource{From: FromEnv}},
			"Redis redis://" + addr + "/0 (from $REDIS_URL): dial tcp " + addr + ": connect: connection refused"},
		{"host:port", &Redis{URL: addr, src: RedisSource{From: FromFlag}},
			"Redis redis://" + addr + "/0 (from -redis): dial tcp " + addr + ": connect: connection refused"},
		{"default", &Redis{URL: "redis://" + addr + "/0", src: RedisSource{From: FromDefault, DevFile: "/run/user/7/airlock/dev-redis-url"}},
			"Redis redis://" + addr + "/0 (the default: no -redis, $REDIS_URL or dev-mode URL file /run/user/7/airlock/dev-redis-url): dial tcp " + addr +
				": connect: connection refused; give -redis URL or set $REDIS_URL, or start worker -dev to try Airlock locally"},
		{"dev file, its worker gone", &Redis{URL: "redis://" + addr + "/0", src: RedisSource{From: FromDevFile, DevFile: "/tmp/airlock-7/dev-redis-url"}},
			"Redis redis://" + addr + "/0 (from /tmp/airlock-7/dev-redis-url, written by worker -dev): dial tcp " + addr +
				": connect: connection refused; the worker -dev that wrote /tmp/airlock-7/dev-redis-url is gone: start it again, or remove the file and give -redis URL or set $REDIS_URL"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // go-redis takes ~2s to give up on a refused dial
			err := pingErr(t, c.r)
			got := c.r.Explain(fmt.Errorf("airlock: list queues: %w", err))
			var re *RedisError
			if !errors.As(got, &re) || !errors.Is(got, err) {
				t.Fatalf("%v is not a *RedisError wrapping the PING's error", got)
			}
			want := strings.Replace(c.want, "): dial tcp", "): airlock: list queues: dial tcp", 1)
			if got.Error() != want {
				t.Errorf("\n got %s\nwant %s", got, want)
			}
			if again := c.r.Explain(got); again != got {
				t.Errorf("explained twice: %v", again)
			}
		})
	}
	r := &Redis{URL: "redis://" + addr + "/0", src: RedisSource{From: FromFlag}}
	for _, err := range []error{
		errors.New("airlock: task \"x\" not found in any queue"),
		fmt.Errorf("task t not done within -wait-timeout 50ms: %w", context.DeadlineExceeded),
		context.Canceled,
		&os.PathError{Op: "open", Path: "/nonexistent/spec.json", Err: syscall.ENOENT},
	} {
		if got := r.Explain(err); got != err {
			t.Errorf("Explain(%v) = %v: not a connection error", err, got)
		}
	}
}

// TestRedisFlagSource: -redis given makes the flag the source; a bad URL
// names where it came from.
func TestRedisFlagSource(t *testing.T) {
	t.Setenv("REDIS_URL", "localhost")
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	r := RedisFlags(fs)
	if r.Source().From != FromEnv {
		t.Fatalf("source %+v, want $REDIS_URL", r.Source())
	}
	if _, _, err := r.Open(); err == nil || !strings.HasPrefix(err.Error(), `$REDIS_URL: "localhost" has no scheme: write redis://localhost`) {
		t.Errorf("a bad $REDIS_URL: %v", err)
	}
	if err := fs.Parse([]string{"-redis", "127.0.0.1:6380"}); err != nil {
		t.Fatal(err)
	}
	if r.URL != "127.0.0.1:6380" || r.Source().From != FromFlag || r.Source().String() != "from -redis" {
		t.Errorf("after -redis: %q, %+v", r.URL, r.Source())
	}
	if _, conf, err := r.Open(); err != nil || conf.String() != "redis://127.0.0.1:6380/0" {
		t.Errorf("-redis HOST:PORT: %v, %v", conf, err)
	}
	if err := fs.Parse([]string{"-redis", "nowhere"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.Open(); err == nil || !strings.HasPrefix(err.Error(), `-redis: "nowhere" has no scheme`) {
		t.Errorf("a bad -redis: %v", err)
	}
}

// TestVersionFlag: every command's Parse takes -version, prints the one
// version string and ends as -h does (exit 0).
func TestVersionFlag(t *testing.T) {
	for _, fs := range []*flag.FlagSet{NewFlagSet("cmd", "usage: cmd\n"), flag.NewFlagSet("worker", flag.ContinueOnError)} {
		var out, errOut bytes.Buffer
		err := Parse(fs, []string{"-version"}, &out, &errOut)
		if !errors.Is(err, ErrVersion) || !errors.Is(err, flag.ErrHelp) || out.String() != airlock.Version+"\n" || errOut.Len() != 0 {
			t.Errorf("%s -version: %v, stdout %q, stderr %q", fs.Name(), err, out.String(), errOut.String())
		}
		if code := FlagsExit(&out, &errOut, fs.Name(), false, err); code != ExitOK {
			t.Errorf("%s -version: exit %d", fs.Name(), code)
		}
		// Parsed again (approve's flags after its command): no second
		// definition, and no version without the flag.
		out.Reset()
		if err := Parse(fs, nil, &out, &errOut); err != nil && !errors.Is(err, ErrVersion) {
			t.Errorf("%s parsed again: %v", fs.Name(), err)
		}
	}
	fs := NewFlagSet("cmd", "usage: cmd\n")
	var out bytes.Buffer
	if err := Parse(fs, []string{"-h"}, &out, &out); !errors.Is(err, flag.ErrHelp) || !strings.Contains(out.String(), "-version") {
		t.Errorf("-h does not list -version: %q", out.String())
	}
}

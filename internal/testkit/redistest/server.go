package redistest

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// startTimeout bounds the wait for a started redis-server to answer PING.
const startTimeout = 10 * time.Second

func findRedisServer() (string, bool) {
	p, err := exec.LookPath("redis-server")
	return p, err == nil
}

// startRedisServer starts the redis-server at path on a free loopback port,
// without persistence, and returns its URL once it answers PING. It is
// never stopped: Pdeathsig kills it when the test binary exits.
//
// Pdeathsig is delivered when the OS thread that started the process exits.
// The Go runtime only ends a thread when a goroutine locked to it
// (runtime.LockOSThread) returns without unlocking; tests of this module do
// not do that.
func startRedisServer(path string) (string, error) {
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ { // the free port may be taken before redis-server binds it
		url, err := tryRedisServer(path)
		if err == nil {
			return url, nil
		}
		lastErr = err
	}
	return "", lastErr
}

func tryRedisServer(path string) (string, error) {
	port, err := freePort()
	if err != nil {
		return "", err
	}
	// The log goes to an unlinked file: an *os.File needs no copying
	// goroutine (which goleak would report), and it is read back only to
	// explain a failed start.
	log, err := os.CreateTemp("", "redistest-*.log")
	if err != nil {
		return "", err
	}
	_ = os.Remove(log.Name())
	defer log.Close() // the child keeps its own descriptor

	cmd := exec.Command(path,
		"--bind", "127.0.0.1", "--port", strconv.Itoa(port),
		"--save", "", "--appendonly", "no",
		"--dir", os.TempDir(), "--loglevel", "warning")
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = dieWithParent()
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("starting %s: %w", path, err)
	}
	url := fmt.Sprintf("redis://127.0.0.1:%d/0", port)
	if err := waitPing(url, startTimeout); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		out := readBack(log)
		return "", fmt.Errorf("%s on port %d did not answer PING: %w; its output: %q", path, port, err, out)
	}
	return url, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func waitPing(url string, timeout time.Duration) error {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return err
	}
	opt.MaxRetries = -1
	c := redis.NewClient(opt)
	defer c.Close()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err = c.Ping(ctx).Err()
		cancel()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func readBack(f *os.File) string {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return ""
	}
	b, _ := io.ReadAll(io.LimitReader(f, 4096))
	return string(b)
}

// startMiniredis starts the embedded server shared by the binary's tests.
// It is never closed; GoleakOptions names its goroutines.
func startMiniredis() (string, error) {
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return "", fmt.Errorf("starting miniredis: %w", err)
	}
	return "redis://" + m.Addr() + "/0", nil
}

// Package devredis runs an embedded Redis (miniredis) for development, so
// that a worker and an enqueuer can be tried on a machine without Redis.
//
// It is not for production: the data lives in memory only, and miniredis
// implements the commands and Lua scripts that asynq uses, not all of
// Redis. Keys expire against the wall clock, as on a real Redis.
package devredis

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/alicebob/miniredis/v2"
)

// DefaultAddr is where the development Redis listens when Start is given no
// address: the address a local Redis would have.
const DefaultAddr = "127.0.0.1:6379"

// ErrAddrInUse is matched (errors.Is) by the error of Start when something
// already listens on the address.
var ErrAddrInUse = errors.New("address already in use")

// AddrInUseError is the error of Start when Addr is taken, often by a real
// Redis.
type AddrInUseError struct {
	Addr string
	Err  error // the listen error
}

// Error names the address, with a hint.
func (e *AddrInUseError) Error() string {
	return fmt.Sprintf("devredis: %s is already in use (a Redis may be running there: use it instead, or pick another address)", e.Addr)
}

// Is reports whether target is ErrAddrInUse.
func (e *AddrInUseError) Is(target error) bool { return target == ErrAddrInUse }

// Unwrap returns the listen error.
func (e *AddrInUseError) Unwrap() error { return e.Err }

// Server is a running development Redis.
type Server struct {
	m *miniredis.Miniredis
}

// Start runs an embedded Redis on addr (DefaultAddr when empty; port 0 picks
// a free port). When addr is taken, the error matches ErrAddrInUse.
func Start(addr string) (*Server, error) {
	if addr == "" {
		addr = DefaultAddr
	}
	m := miniredis.NewMiniRedis()
	m.ClockTTL(true) // without it, miniredis keys never expire
	if err := m.StartAddr(addr); err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, &AddrInUseError{Addr: addr, Err: err}
		}
		return nil, fmt.Errorf("devredis: listening on %s: %w", addr, err)
	}
	return &Server{m: m}, nil
}

// Addr is the host:port the server listens on.
func (s *Server) Addr() string { return s.m.Addr() }

// URL is the server's Redis URL, database 0: "redis://ADDR/0".
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Close stops the server, closing its connections, and drops its data.
func (s *Server) Close() error {
	s.m.Close()
	return nil
}

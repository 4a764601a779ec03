package redisconn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// Unreachable reports whether err is an error reaching Redis rather than
// one Redis answered: a refused, reset or timed-out connection, an
// unknown host, a TLS failure, a refused password, a closed client or a
// pool with no free connection. A context's end is not one, unless it cut
// a dial. The CLIs and the HTTP API (503) tell an outage from a bad
// request with it.
func Unreachable(err error) bool {
	if err == nil {
		return false
	}
	var op *net.OpError
	var dns *net.DNSError
	switch {
	case errors.As(err, &op) && op.Op == "dial", errors.As(err, &dns):
		return true
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return false
	case errors.As(err, &op): // a read or write on the connection: reset, timed out
		return true
	}
	var hostErr x509.HostnameError
	var authErr x509.UnknownAuthorityError
	var certErr x509.CertificateInvalidError
	var recErr tls.RecordHeaderError
	if errors.As(err, &hostErr) || errors.As(err, &authErr) ||
		errors.As(err, &certErr) || errors.As(err, &recErr) ||
		errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrClosed) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	msg := err.Error()
	for _, s := range []string{"NOAUTH", "WRONGPASS", "invalid password", "connection refused", "no such host", "i/o timeout", "tls: "} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

package metrics

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ReadyFunc says whether the worker is ready to take tasks: nil when it
// is, else why not (the body of /readyz's 503).
type ReadyFunc func(ctx context.Context) error

// Handler serves:
//
//	GET /healthz  200 "ok": the process is alive and serving HTTP
//	GET /readyz   200 "ready" when ready returns nil, else 503 "not ready: <reason>"
//	GET /metrics  m's registry in Prometheus' text format
//
// (HEAD too). Anything else is 404, another method 405.
func Handler(m *Metrics, ready ReadyFunc) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		text(w, http.StatusOK, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := ready(r.Context()); err != nil {
			m.readyFail.Inc()
			text(w, http.StatusServiceUnavailable, "not ready: "+err.Error()+"\n")
			return
		}
		text(w, http.StatusOK, "ready\n")
	})
	mux.Handle("GET /metrics", promhttp.InstrumentMetricHandler(m.reg, promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
	})))
	return mux
}

func text(w http.ResponseWriter, code int, body string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(body))
}

// Server is the HTTP server of the health and metrics endpoints.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
}

// Timeouts of the endpoints' server: a scraper or a health check that
// stalls cannot hold a connection.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second
	writeTimeout      = 30 * time.Second
	idleTimeout       = 60 * time.Second
)

// Listen listens on addr (host:port; ":9090" is every interface) and
// serves h until Shutdown. The error of a bad or taken address is
// returned at once. errLog receives the server's own errors (nil: the
// standard logger).
func Listen(addr string, h http.Handler, errLog *log.Logger) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &Server{
		srv: &http.Server{
			Handler: h, ReadHeaderTimeout: readHeaderTimeout, ReadTimeout: readTimeout,
			WriteTimeout: writeTimeout, IdleTimeout: idleTimeout, MaxHeaderBytes: 16 << 10,
			ErrorLog: errLog,
		},
		ln: ln, done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) && errLog != nil {
			errLog.Printf("serve: %v", err)
		}
	}()
	return s, nil
}

// Addr is the address the server listens on (the port chosen for ":0").
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Shutdown stops listening and waits, up to timeout, for the requests in
// progress; then it closes the connections left.
func (s *Server) Shutdown(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		_ = s.srv.Close()
		err = fmt.Errorf("metrics server shutdown: %w", err)
	}
	<-s.done
	return err
}

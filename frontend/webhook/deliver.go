package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/rs/zerolog"
)

// TypeDeliver is the asynq task type of one delivery: one event to one
// endpoint.
const TypeDeliver = "airlock:webhook"

// Delivery defaults.
const (
	// DefaultQueue is the asynq queue of deliveries under the default
	// prefix ("airlock-webhooks:P" under another prefix "P:"). Workers
	// must not serve it (they have no handler for TypeDeliver).
	DefaultQueue = "airlock-webhooks"
	// DefaultMaxRetry: 11 attempts, over about 44 hours (RetryDelay).
	DefaultMaxRetry = 10
	// DefaultTimeout bounds one POST, response headers included.
	DefaultTimeout = 10 * time.Second
	// maxResponse is how much of a response is read (and discarded).
	maxResponse = 64 << 10
	// maxRetryAfter caps a receiver's Retry-After.
	maxRetryAfter = 12 * time.Hour
)

// payload is a delivery task's payload. It names the endpoint by its key:
// neither the URL nor the secret is ever written to Redis.
type payload struct {
	Endpoint string `json:"endpoint"` // Endpoint.key
	ID       string `json:"id"`       // the event id: webhook-id
	Type     string `json:"type"`
	Body     []byte `json:"body"` // exactly what is POSTed and signed
}

// RetryDelay is the back-off of the n-th retry (n from 0) of a delivery:
// 5 s, 20 s, 80 s… ×4 each time, at most 12 h, ±20% jitter; about 44
// hours over DefaultMaxRetry retries, the Standard Webhooks' advice of a
// schedule spanning days.
func RetryDelay(n int) time.Duration {
	d := 5 * time.Second
	for i := 0; i < n && d < maxRetryAfter; i++ {
		d *= 4
	}
	d = min(d, maxRetryAfter)
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// statusError is a response other than 2xx and 410.
type statusError struct {
	endpoint   string
	code       int
	retryAfter time.Duration
	snippet    string
}

func (e *statusError) Error() string {
	s := fmt.Sprintf("webhook %s: status %d", e.endpoint, e.code)
	if e.snippet != "" {
		s += ": " + strconv.Quote(e.snippet)
	}
	return s
}

// retryDelayFunc is the asynq RetryDelayFunc of the delivery server: a
// receiver's Retry-After (429, 503…) when it gave one, else delay(n).
func retryDelayFunc(delay func(int) time.Duration) asynq.RetryDelayFunc {
	return func(n int, err error, _ *asynq.Task) time.Duration {
		var se *statusError
		if errors.As(err, &se) && se.retryAfter > 0 {
			return se.retryAfter
		}
		return delay(n)
	}
}

// Handler delivers TypeDeliver tasks: it POSTs the body to its endpoint
// with the Standard Webhooks headers. A 2xx response is success; 410 Gone
// stops (no retry); any other status, a redirect (never followed), a
// timeout or a network error is retried by asynq with back-off.
type Handler struct {
	endpoints map[string]Endpoint
	client    *http.Client
	transport *http.Transport
	log       zerolog.Logger
	now       func() time.Time
}

// NewHandler returns the handler of deliveries to endpoints, each POST
// bounded by timeout (DefaultTimeout when <= 0). Close it when done.
func NewHandler(endpoints []Endpoint, timeout time.Duration, log zerolog.Logger) (*Handler, error) {
	if err := checkEndpoints(endpoints); err != nil {
		return nil, err
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		TLSHandshakeTimeout:   timeout,
		ResponseHeaderTimeout: timeout,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
	}
	h := &Handler{
		endpoints: map[string]Endpoint{},
		transport: tr,
		client: &http.Client{
			Transport: tr,
			Timeout:   timeout,
			// A redirect is a failure (Standard Webhooks: update the URL).
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		log: log,
		now: time.Now,
	}
	for _, e := range endpoints {
		h.endpoints[e.key()] = e
	}
	return h, nil
}

// Close closes the handler's idle connections.
func (h *Handler) Close() { h.transport.CloseIdleConnections() }

// ProcessTask delivers one TypeDeliver task (asynq.Handler).
func (h *Handler) ProcessTask(ctx context.Context, t *asynq.Task) error {
	var p payload
	if err := json.Unmarshal(t.Payload(), &p); err != nil || p.ID == "" || p.Endpoint == "" {
		return fmt.Errorf("webhook: bad task payload: %w", asynq.SkipRetry)
	}
	log := h.log.With().Str("event_id", p.ID).Str("type", p.Type).Logger()
	retry, _ := asynq.GetRetryCount(ctx)
	maxRetry, _ := asynq.GetMaxRetry(ctx)
	ep, ok := h.endpoints[p.Endpoint]
	if !ok {
		// Another process (a rolling update) may know it: retried, and
		// archived by asynq after its last retry.
		log.Warn().Str("endpoint_key", p.Endpoint).Int("retry", retry).Msg("webhook endpoint not configured in this process")
		return fmt.Errorf("webhook: endpoint %s is not configured in this process", p.Endpoint)
	}
	log = log.With().Str("endpoint", ep.String()).Logger()
	err := h.post(ctx, ep, p)
	switch {
	case err == nil:
		log.Debug().Int("retry", retry).Msg("webhook delivered")
		return nil
	case errors.Is(err, asynq.SkipRetry):
		log.Error().Err(err).Msg("webhook endpoint answered 410 Gone: delivery stopped")
		return err
	case retry >= maxRetry:
		log.Error().Err(err).Int("retry", retry).Msg("webhook delivery failed for the last time; asynq archives it")
	default:
		log.Warn().Err(err).Int("retry", retry).Msg("webhook delivery failed; retried later")
	}
	return err
}

// post sends p to ep once.
func (h *Handler) post(ctx context.Context, ep Endpoint, p payload) error {
	if err := checkURL(ep.URL); err != nil { // an Endpoint built by hand
		return fmt.Errorf("webhook %s: %v: %w", ep, err, asynq.SkipRetry)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep.URL, bytes.NewReader(p.Body))
	if err != nil {
		return fmt.Errorf("webhook %s: %v: %w", ep, err, asynq.SkipRetry)
	}
	ts := h.now()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "airlock-webhook")
	req.Header.Set(HeaderID, p.ID)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	if len(ep.Secret) > 0 {
		req.Header.Set(HeaderSignature, Sign(ep.Secret, p.ID, ts, p.Body))
	}
	resp, err := h.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its URL may hold a secret
		}
		return fmt.Errorf("webhook %s: %w", ep, err)
	}
	defer resp.Body.Close()
	head := make([]byte, 200)
	n, _ := io.ReadFull(resp.Body, head)
	_, _ = io.CopyN(io.Discard, resp.Body, maxResponse-int64(n))
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return nil
	case resp.StatusCode == http.StatusGone:
		return fmt.Errorf("webhook %s: status 410 Gone: %w", ep, asynq.SkipRetry)
	}
	return &statusError{endpoint: ep.String(), code: resp.StatusCode,
		retryAfter: retryAfter(resp.Header.Get("Retry-After"), h.now()), snippet: printable(head[:n])}
}

// retryAfter reads a Retry-After header (seconds or an HTTP date), capped
// at maxRetryAfter; 0 when absent or unreadable.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	var d time.Duration
	if s, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
		d = time.Duration(min(s, int64(maxRetryAfter/time.Second))) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	return max(0, min(d, maxRetryAfter))
}

// printable keeps the printable ASCII of b, for an error message that
// asynq stores in Redis.
func printable(b []byte) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(string(b), " "))
}

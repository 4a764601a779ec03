package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Headers of a delivery, per the Standard Webhooks specification.
const (
	// HeaderID is the event's id: the same on every retry, for dedupe.
	HeaderID = "webhook-id"
	// HeaderTimestamp is the attempt's time, Unix seconds.
	HeaderTimestamp = "webhook-timestamp"
	// HeaderSignature is "v1," and the base64 of HMAC-SHA256(secret,
	// id "." timestamp "." body); several, space-separated, may be sent.
	HeaderSignature = "webhook-signature"
)

// DefaultTolerance is how far from now Verify accepts a timestamp when
// given no tolerance.
const DefaultTolerance = 5 * time.Minute

// Errors of Verify, matched with errors.Is.
var (
	// ErrSignature: a header is missing, or no v1 signature matches.
	ErrSignature = errors.New("webhook: signature does not verify")
	// ErrTimestamp: the timestamp is not a number, or is further from now
	// than the tolerance (a replay, or a clock off).
	ErrTimestamp = errors.New("webhook: timestamp outside the tolerance")
)

// Sign returns the webhook-signature value of a delivery of body with id
// at time ts: "v1," and the standard base64 of HMAC-SHA256(secret,
// id + "." + unix seconds + "." + body).
func Sign(secret []byte, id string, ts time.Time, body []byte) string {
	return "v1," + base64.StdEncoding.EncodeToString(mac(secret, id, ts.Unix(), body))
}

func mac(secret []byte, id string, ts int64, body []byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(id))
	h.Write([]byte{'.'})
	h.Write(strconv.AppendInt(nil, ts, 10))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

// Verify checks a delivery as its receiver: headers (webhook-id,
// webhook-timestamp, webhook-signature) and the raw body, as received,
// against secret (the decoded bytes; see ParseSecret). The timestamp must
// be within tolerance of now, either way (DefaultTolerance when
// tolerance <= 0); one of the space-separated signatures must be a v1
// signature that matches, compared in constant time. It returns nil, or
// an error matching ErrSignature or ErrTimestamp.
func Verify(secret []byte, headers http.Header, body []byte, tolerance time.Duration) error {
	return verify(secret, headers, body, tolerance, time.Now())
}

func verify(secret []byte, headers http.Header, body []byte, tolerance time.Duration, now time.Time) error {
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	id, tsText, sigs := headers.Get(HeaderID), headers.Get(HeaderTimestamp), headers.Get(HeaderSignature)
	if id == "" || tsText == "" || sigs == "" {
		return fmt.Errorf("%w: missing %s, %s or %s", ErrSignature, HeaderID, HeaderTimestamp, HeaderSignature)
	}
	ts, err := strconv.ParseInt(tsText, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %s is not a number", ErrTimestamp, HeaderTimestamp)
	}
	if d := now.Sub(time.Unix(ts, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: %s is %s from now (tolerance %s)", ErrTimestamp, HeaderTimestamp, d.Round(time.Second), tolerance)
	}
	want := mac(secret, id, ts, body)
	for _, s := range strings.Fields(sigs) {
		version, enc, ok := strings.Cut(s, ",")
		if !ok || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(enc)
		if err != nil {
			continue
		}
		if hmac.Equal(got, want) {
			return nil
		}
	}
	return fmt.Errorf("%w: no v1 signature matches", ErrSignature)
}

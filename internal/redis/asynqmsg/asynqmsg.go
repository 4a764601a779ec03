// Package asynqmsg encodes a task the way asynq v0.26 stores it (its
// internal base.TaskMessage, a protocol buffer in the task hash's "msg"
// field), so that Airlock can write a task and admit it in one script
// (internal/redis/fairshare.Enqueue) where asynq's client would take a
// script of its own first. Only the fields asynq's Client.Enqueue sets
// are written; the test decodes them with asynq's own Inspector and runs
// the task with asynq's own server, so that a drift in asynq's format
// fails there.
package asynqmsg

import (
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// Message is a new task as asynq's Client.Enqueue would store it.
type Message struct {
	Type    string
	Payload []byte
	Headers map[string]string // trace context; nil: none
	ID      string
	Queue   string
	Retry   int
	// Timeout is the task's timeout, stored in whole seconds (asynq drops
	// the fraction). Zero with no Deadline is asynq's default, 30 minutes.
	Timeout time.Duration
	// Deadline; zero: none.
	Deadline time.Time
	// Group is the asynq group the task is held in ("": none).
	Group string
	// Retention keeps the completed task (and its result) that long.
	Retention time.Duration
}

// noDeadline is asynq's "no deadline" (time.Unix(0, 0)).
var noDeadline = time.Unix(0, 0)

// defaultTimeout is asynq's timeout of a task enqueued with neither.
const defaultTimeout = 30 * time.Minute

// Field numbers of asynq v0.26's TaskMessage (internal/proto/asynq.proto).
const (
	fieldType      = 1
	fieldPayload   = 2
	fieldID        = 3
	fieldQueue     = 4
	fieldRetry     = 5
	fieldTimeout   = 8
	fieldDeadline  = 9
	fieldRetention = 12
	fieldGroupKey  = 14
	fieldHeaders   = 15
)

// Encode returns m as asynq stores it in the task hash's "msg" field.
func Encode(m Message) []byte {
	deadline := noDeadline
	if !m.Deadline.IsZero() {
		deadline = m.Deadline
	}
	// As asynq's client: its default timeout when neither is set (a
	// timeout below a second then stores as none, as asynq's does), no
	// negative retry count.
	timeout := m.Timeout
	if m.Deadline.IsZero() && timeout == 0 {
		timeout = defaultTimeout
	}
	b := make([]byte, 0, len(m.Payload)+len(m.ID)+len(m.Queue)+len(m.Type)+64)
	b = appendString(b, fieldType, m.Type)
	if len(m.Payload) > 0 {
		b = protowire.AppendTag(b, fieldPayload, protowire.BytesType)
		b = protowire.AppendBytes(b, m.Payload)
	}
	b = appendString(b, fieldID, m.ID)
	b = appendString(b, fieldQueue, m.Queue)
	b = appendInt(b, fieldRetry, int64(int32(max(m.Retry, 0))))
	b = appendInt(b, fieldTimeout, int64(timeout.Seconds()))
	b = appendInt(b, fieldDeadline, deadline.Unix())
	b = appendInt(b, fieldRetention, int64(m.Retention.Seconds()))
	b = appendString(b, fieldGroupKey, m.Group)
	for k, v := range m.Headers {
		var e []byte
		e = appendString(e, 1, k)
		e = appendString(e, 2, v)
		b = protowire.AppendTag(b, fieldHeaders, protowire.BytesType)
		b = protowire.AppendBytes(b, e)
	}
	return b
}

// appendString appends a string field; proto3 leaves out the empty one.
func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

// appendInt appends an int32 or int64 field (varint); proto3 leaves out 0.
func appendInt(b []byte, num protowire.Number, v int64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(v))
}

// Stored is what Decode reads of a stored task message: the fields
// Encode writes (a deadline of asynq's "none" as zero), and those asynq's
// server changes (its retries and last error).
type Stored struct {
	Message
	Retried  int
	ErrorMsg string
}

// Field numbers asynq's server writes.
const (
	fieldRetried  = 6
	fieldErrorMsg = 7
)

// Decode reads a task message as asynq v0.26 stores it; fields it does not
// use are skipped.
func Decode(b []byte) (Stored, error) {
	var s Stored
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return Stored{}, protowire.ParseError(n)
		}
		b = b[n:]
		switch {
		case typ == protowire.BytesType && num == fieldHeaders:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return Stored{}, protowire.ParseError(n)
			}
			k, val, err := decodeEntry(v)
			if err != nil {
				return Stored{}, err
			}
			if s.Headers == nil {
				s.Headers = map[string]string{}
			}
			s.Headers[k] = val
			b = b[n:]
		case typ == protowire.BytesType && (num == fieldType || num == fieldPayload || num == fieldID || num == fieldQueue || num == fieldGroupKey || num == fieldErrorMsg):
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return Stored{}, protowire.ParseError(n)
			}
			switch num {
			case fieldType:
				s.Type = string(v)
			case fieldPayload:
				s.Payload = append([]byte(nil), v...)
			case fieldID:
				s.ID = string(v)
			case fieldQueue:
				s.Queue = string(v)
			case fieldGroupKey:
				s.Group = string(v)
			case fieldErrorMsg:
				s.ErrorMsg = string(v)
			}
			b = b[n:]
		case typ == protowire.VarintType && (num == fieldRetry || num == fieldRetried || num == fieldTimeout || num == fieldDeadline || num == fieldRetention):
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return Stored{}, protowire.ParseError(n)
			}
			switch num {
			case fieldRetry:
				s.Retry = int(int32(v))
			case fieldRetried:
				s.Retried = int(int32(v))
			case fieldTimeout:
				s.Timeout = time.Duration(int64(v)) * time.Second
			case fieldDeadline:
				if d := int64(v); d != 0 {
					s.Deadline = time.Unix(d, 0)
				}
			case fieldRetention:
				s.Retention = time.Duration(int64(v)) * time.Second
			}
			b = b[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return Stored{}, protowire.ParseError(n)
			}
			b = b[n:]
		}
	}
	return s, nil
}

// decodeEntry reads a map<string, string> entry: its key (field 1) and
// value (field 2).
func decodeEntry(b []byte) (key, val string, err error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "", "", protowire.ParseError(n)
		}
		b = b[n:]
		if typ == protowire.BytesType && (num == 1 || num == 2) {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return "", "", protowire.ParseError(n)
			}
			if num == 1 {
				key = string(v)
			} else {
				val = string(v)
			}
			b = b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return "", "", protowire.ParseError(n)
		}
		b = b[n:]
	}
	return key, val, nil
}

//go:build linux

package sandbox

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"

	"golang.org/x/sys/unix"
)

// The worker and a slot helper speak over a unix stream socket: each
// message is a 4-byte big-endian length and a JSON body; a run request
// carries the step's stdin, stdout and stderr as SCM_RIGHTS on the same
// sendmsg as its header.

const maxMessage = 8 << 20

// request is a message from the worker to its helper.
type request struct {
	Op  string      `json:"op"` // "run", "cancel" or "kill"
	Run *runRequest `json:"run,omitempty"`
}

// runRequest asks the helper to run one step. The helper finds the
// program and runs it in the workspace, as the step sees them.
type runRequest struct {
	Argv      []string `json:"argv"`
	Env       []string `json:"env"`
	Rlimits   []Rlimit `json:"rlimits"`
	TimeoutNS int64    `json:"timeout_ns"`
	GraceNS   int64    `json:"grace_ns"`
	// Dir is the directory the step starts in, relative to the
	// workspace ("": the workspace).
	Dir string `json:"dir,omitempty"`
}

// hello is the helper's first message: what confinement it could apply.
type hello struct {
	Status Status `json:"status"`
	Error  string `json:"error,omitempty"`
}

// runResponse is the helper's answer to a runRequest.
type runResponse struct {
	StartError string `json:"start_error,omitempty"`
	Exited     bool   `json:"exited"`
	ExitCode   int    `json:"exit_code"`
	Signal     int    `json:"signal"`
	TimedOut   bool   `json:"timed_out"`
	Canceled   bool   `json:"canceled"`
	UtimeUS    int64  `json:"utime_us"`
	StimeUS    int64  `json:"stime_us"`
	MaxRSSKB   int64  `json:"max_rss_kb"`
	DurationNS int64  `json:"duration_ns"`
	Killed     int    `json:"killed"` // processes left behind and killed at the end
	// Leftover says what the IPC sweep after the step could not remove,
	// or what the step changed of the helper (tamper.go); the slot then
	// replaces its helper.
	Leftover string `json:"leftover,omitempty"`
}

func writeMsg(c *net.UnixConn, v any, fds []int) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	buf := make([]byte, 4+len(body))
	binary.BigEndian.PutUint32(buf, uint32(len(body)))
	copy(buf[4:], body)
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	n, _, err := c.WriteMsgUnix(buf, oob, nil)
	if err != nil {
		return err
	}
	if n < len(buf) {
		_, err = c.Write(buf[n:])
	}
	return err
}

// readMsg reads one message into v and returns the descriptors that came
// with it (close-on-exec).
func readMsg(c *net.UnixConn, v any) ([]int, error) {
	var hdr [4]byte
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, _, _, err := c.ReadMsgUnix(hdr[:], oob)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, io.EOF
	}
	var fds []int
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			got, err := unix.ParseUnixRights(&m)
			if err == nil {
				fds = append(fds, got...)
			}
		}
	}
	closeAll := func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
	if n < 4 {
		if _, err := io.ReadFull(c, hdr[n:]); err != nil {
			closeAll()
			return nil, err
		}
	}
	size := binary.BigEndian.Uint32(hdr[:])
	if size > maxMessage {
		closeAll()
		return nil, fmt.Errorf("sandbox: message of %d bytes", size)
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(c, body); err != nil {
		closeAll()
		return nil, err
	}
	if err := json.Unmarshal(body, v); err != nil {
		closeAll()
		return nil, err
	}
	return fds, nil
}

// ErrHelperDied is returned when a slot's helper went away mid-request.
var ErrHelperDied = errors.New("sandbox: slot helper died")

package session

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/airlock-run/airlock/tasks"
)

// TestEncodeCall checks that encodeCall writes what json.Marshal does,
// with data and without, and refuses a call above MaxCallBytes.
func TestEncodeCall(t *testing.T) {
	for _, c := range []Call{
		{ID: "c1", Op: OpWrite, Path: "in/a <b>.csv", Data: []byte("id,amount\n1,10\n\x00\xff")},
		{ID: "c2", Op: OpWrite, Path: "empty", Data: []byte{}},
		{ID: "c3", Op: OpRead, Path: "out/r.json"},
		{ID: "c4", Op: OpStep, Step: &tasks.Step{Name: "s", Run: []string{"sh", "-c", "echo \"&\""}}},
		{ID: "c5", Op: OpWrite, Path: "big", Data: bytes.Repeat([]byte{0xfb, 'x', 0}, MaxFileBytes/3)},
	} {
		want, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		got, err := encodeCall(c)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("call %s: %v\n got %.200s\nwant %.200s", c.ID, err, got, want)
		}
	}
	_, err := encodeCall(Call{ID: "big", Op: OpWrite, Path: "x", Data: make([]byte, MaxCallBytes)})
	var se *Error
	if !errors.As(err, &se) || se.Status != http.StatusRequestEntityTooLarge {
		t.Errorf("a call above MaxCallBytes: %v", err)
	}
}

package contract_test

import (
	"errors"
	"testing"

	"github.com/airlock-run/airlock/contract"
)

// A result with a key twice, anywhere, is refused naming the key's
// pointer; one without is returned as written.
func TestReadResultDuplicateKeys(t *testing.T) {
	ws := newWorkspace(t)
	files := map[string]string{
		"out/top.json":     `{"amount": 5000000, "amount": 5}`,
		"out/nested.json":  `{"items": [{"amount": 1}, {"amount": 2, "amount": 3}]}`,
		"out/escaped.json": `{"amount": 5000000, "\u0061mount": 5}`,
		"out/fine.json":    `{"amount": 5, "items": [{"amount": 1}, {"amount": 2}]}`,
	}
	write(t, ws, files)
	for rel, want := range map[string]string{
		"out/top.json":     `out/top.json: duplicate key "amount" at /amount`,
		"out/nested.json":  `out/nested.json: duplicate key "amount" at /items/1/amount`,
		"out/escaped.json": `out/escaped.json: duplicate key "amount" at /amount`,
	} {
		got, err := contract.ReadResult(ws, rel, 0)
		if !errors.Is(err, contract.ErrDuplicateKey) || err.Error() != want || got != nil {
			t.Errorf("ReadResult(%s) = %q, %v; want the error %q", rel, got, err, want)
		}
	}
	if got, err := contract.ReadResult(ws, "out/fine.json", 0); err != nil || string(got) != files["out/fine.json"] {
		t.Errorf("ReadResult(out/fine.json) = %q, %v", got, err)
	}
}

//go:build linux

package sandbox

import (
	"fmt"
	"net"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// startSteps are the steps of Slot.start a test can make fail (startFault);
// "" fails none.
var startSteps = []string{"", "socketpair", "exec", "control-conn", "egress-pair", "egress-conn", "send", "hello", "helper-error"}

// TestParallelStartsLeakNoDescriptor starts 16 slots at once, three times,
// most of them made to fail at a chosen step of their start, with egress
// (the most descriptors a start opens), and checks that every start that
// should succeed did, every other failed where it was told to, and that
// the process holds no more and no fewer descriptors after than before: a
// failed start closes what it opened, and closes nothing twice (a second
// close of a raw descriptor number closes another goroutine's).
func TestParallelStartsLeakNoDescriptor(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("egress needs a network namespace of the slot's own: run as root")
	}
	const n = 16
	cfgs := make([]SlotConfig, n)
	failAt := map[string]string{} // workspace → step
	for i := range cfgs {
		cfgs[i] = testConfig(t)
		cfgs[i].Egress = func(c net.Conn) { c.Close() }
		failAt[cfgs[i].Workspace] = startSteps[i%len(startSteps)]
	}
	startFault = func(s *Slot, step string) error {
		if failAt[s.cfg.Workspace] == step {
			return fmt.Errorf("injected failure at %s", step)
		}
		return nil
	}
	defer func() { startFault = nil }()
	// No collection during the test: a finalizer would close a leaked
	// connection behind its back.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	before := fdList(t)
	for round := 0; round < 3; round++ {
		slots := make([]*Slot, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range cfgs {
			wg.Add(1)
			go func() { defer wg.Done(); slots[i], errs[i] = NewSlot(cfgs[i]) }()
		}
		wg.Wait()
		for i, err := range errs {
			step := failAt[cfgs[i].Workspace]
			switch {
			case step == "" && err != nil:
				t.Errorf("round %d: slot %d: %v", round, i, err)
			case step != "" && (err == nil || !strings.Contains(err.Error(), "injected failure at "+step)):
				t.Errorf("round %d: slot %d made to fail at %s: got %v", round, i, step, err)
			}
			if slots[i] != nil {
				if err := slots[i].Close(); err != nil {
					t.Errorf("round %d: close slot %d: %v", round, i, err)
				}
			}
		}
	}
	// A closed slot's egress goroutine ends when it reads its helper's
	// end: soon after, not at once.
	var after []string
	deadline := time.Now().Add(5 * time.Second)
	for {
		after = fdList(t)
		if len(after) == len(before) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(after) != len(before) {
		t.Errorf("%d descriptors open before the starts, %d after:\nbefore %v\nafter  %v", len(before), len(after), before, after)
	}
}

// fdList lists the process's open descriptors, each with what it is.
func fdList(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		target, _ := os.Readlink("/proc/self/fd/" + e.Name())
		out = append(out, e.Name()+"="+target)
	}
	slices.Sort(out)
	return out
}

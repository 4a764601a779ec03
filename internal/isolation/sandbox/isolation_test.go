//go:build linux

package sandbox

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestPlanMissingAndVerdict checks the missing tiers a worker without
// root, quota, cgroups or user namespaces reports, in their order, and
// that strict mode refuses them and best-effort does not.
func TestPlanMissingAndVerdict(t *testing.T) {
	p := &Plan{Mode: Strict, Root: false, UIDFirst: 200000}
	p.SetQuota("scan after each step", false)
	if m := p.OpenCgroups("off", ""); m != nil {
		t.Fatal("cgroups opened though off")
	}
	iso := p.Tiers(Status{Root: "off: no mount namespace", Landlock: "abi 6 (writes only in the workspace, tcp denied)",
		Seccomp: "airlock-default: 80 rules", IPC: "host ipc namespace", Keys: "off: no keyring", Descriptors: "closed"})
	want := []string{
		"user (worker is not root: steps run as the worker's uid)",
		"quota (scan after each step)",
		"memory (" + iso.Memory + ")",
		"namespaces (no root and no user namespace: no network or PID namespace)",
		"root (off: no mount namespace)",
		"keys (off: no keyring)",
	}
	if got := p.Missing(iso); !slices.Equal(got, want) {
		t.Errorf("missing:\n got %q\nwant %q", got, want)
	}
	if iso.Network != "landlock only (tcp denied; other protocols open)" || !strings.HasPrefix(iso.User, "off: worker is not root") ||
		iso.Tree != "process group + subreaper (no pid namespace)" || iso.Mode != Strict || iso.FDs != "closed" {
		t.Errorf("tiers: %+v", iso)
	}
	err := p.Verdict(p.Missing(iso))
	if !errors.Is(err, ErrStrict) || !strings.Contains(err.Error(), "keys (off: no keyring) (run as root with CAP_SYS_ADMIN, or pass -isolation=best-effort to run anyway)") {
		t.Errorf("strict verdict: %v", err)
	}
	p.Mode = BestEffort
	if err := p.Verdict(p.Missing(iso)); err != nil {
		t.Errorf("best-effort verdict: %v", err)
	}
	root := &Plan{Mode: Strict, Root: true, UIDFirst: 200000}
	root.SetQuota("tmpfs per slot", true)
	root.cgroups = true
	full := root.Tiers(Status{Root: "pivot_root: own tree", Landlock: "abi 6", Seccomp: "airlock-default", IPC: "ipc namespace per slot", Keys: "session keyring"})
	if m := root.Missing(full); len(m) != 0 || root.Verdict(m) != nil {
		t.Errorf("root with every tier: missing %q", m)
	}
	if full.User != "uid per slot from 200000" || full.Network != "network namespace (loopback only)" {
		t.Errorf("root tiers: %+v", full)
	}
	if err := CheckMode("lax"); err == nil {
		t.Error("mode lax accepted")
	}
}

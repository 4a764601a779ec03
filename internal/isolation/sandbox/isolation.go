//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/airlock-run/airlock/internal/isolation/cgroup"
	"github.com/airlock-run/airlock/record"
)

// Isolation modes: what a worker does when a tier is missing.
const (
	Strict     = "strict"      // refuse to start when a tier is missing
	BestEffort = "best-effort" // start anyway and say loudly what is missing
)

// Plan decides a worker's isolation once, from the machine and the
// operator's choices, as nomad's executor does (NewExecutorWithIsolation):
// the fallback ladder its slots' helpers start by, the wording of each
// tier in the run record, the tiers that are missing, and whether the
// worker may start without them. Set its fields, then call OpenCgroups,
// SetQuota and StartHelpers once each, in that order, before Tiers,
// Missing and Verdict.
type Plan struct {
	Mode     string // Strict or BestEffort
	Root     bool   // the worker runs as root: a uid per slot, namespaces without a user namespace
	UIDFirst int    // the first slot uid, for the user tier
	// Warn, when set, is told of every step down the fallback ladder; it
	// may be called from several goroutines at once.
	Warn func(err error, msg string)

	userNS  bool   // not root, and every slot's helper has a user namespace
	memory  string // the memory tier
	cgroups bool   // memory and processes limited by a cgroup per slot
	quota   string // the workspace quota's mechanism
	quotaOK bool   // a tmpfs per slot
}

// OpenCgroups opens the slots' parent control group under root (mode
// "auto"), or says in the memory tier why memory falls back to rlimits
// (mode "off", or no usable hierarchy); nil then.
func (p *Plan) OpenCgroups(mode, root string) *cgroup.Manager {
	const fallback = "off: RLIMIT_AS and RLIMIT_NPROC fallback (per-process address space, not memory: tmpfs, shm and memfd pages are not counted, and runtimes that reserve address space, such as Node.js and the JVM, may not start; processes count the whole uid)"
	if mode == "off" {
		p.memory = fallback + "; cgroups disabled by the operator"
		return nil
	}
	m, err := cgroup.Open(cgroup.Options{Root: root})
	if err != nil {
		p.memory = fallback + "; " + err.Error()
		return nil
	}
	p.cgroups = true
	p.memory = m.Describe() + ": memory (anonymous, tmpfs, shm, memfd, page cache; no swap) and processes per step"
	return m
}

// SetQuota records how workspaces are bounded: mechanism, and whether it
// is a tmpfs per slot (mounted) or the weaker scan.
func (p *Plan) SetQuota(mechanism string, mounted bool) { p.quota, p.quotaOK = mechanism, mounted }

// StartHelpers starts one helper per configuration, in parallel (each is a
// re-exec that builds namespaces and a view: tens of milliseconds that
// would add up slot by slot). Without root, the first starts alone, in a
// user namespace: whether it got one decides for the others. Each falls
// back (StartHelper) to what the machine allows. It returns the slots
// (nil where one failed), the configurations that started them, and one
// error per configuration; it closes nothing.
func (p *Plan) StartHelpers(cfgs []SlotConfig) ([]*Slot, []SlotConfig, []error) {
	cfgs = append([]SlotConfig(nil), cfgs...)
	boxes := make([]*Slot, len(cfgs))
	errs := make([]error, len(cfgs))
	start := func(i int) {
		if !p.Root && (i == 0 || p.userNS) {
			cfgs[i].Namespaces, cfgs[i].UserNS = true, true
		}
		boxes[i], cfgs[i], errs[i] = p.StartHelper(cfgs[i])
		if i == 0 {
			p.userNS = cfgs[i].UserNS
		}
	}
	first := 0
	if !p.Root && len(cfgs) > 0 {
		start(0) // alone: the others follow what it found
		first = 1
	}
	var wg sync.WaitGroup
	for i := first; i < len(cfgs); i++ {
		wg.Add(1)
		go func() { defer wg.Done(); start(i) }()
	}
	wg.Wait()
	for _, cfg := range cfgs {
		// Namespaces are reported as the least of the slots have them.
		p.userNS = p.userNS && cfg.UserNS
	}
	return boxes, cfgs, errs
}

// StartHelper starts a slot's helper, falling back to what the machine
// allows: in best-effort mode without the steps' own root, then (not
// root) without a user namespace. It returns the configuration that
// started.
func (p *Plan) StartHelper(cfg SlotConfig) (*Slot, SlotConfig, error) {
	cfg.View = cfg.Namespaces
	box, err := NewSlot(cfg)
	if err != nil && cfg.View && p.Mode == BestEffort {
		p.warn(err, "cannot build the steps' own root: steps see the host's filesystem, as Landlock allows")
		cfg.View = false
		box, err = NewSlot(cfg)
	}
	if err != nil && cfg.UserNS {
		p.warn(err, "no user namespace: steps run without PID and network namespaces")
		cfg.Namespaces, cfg.UserNS, cfg.View = false, false, false
		box, err = NewSlot(cfg)
	}
	return box, cfg, err
}

func (p *Plan) warn(err error, msg string) {
	if p.Warn != nil {
		p.Warn(err, msg)
	}
}

// UserNS reports whether the slots' namespaces come from user namespaces
// (a worker that is not root and has them).
func (p *Plan) UserNS() bool { return p.userNS }

// Tiers words every tier in force, as a run record holds them, from the
// status of a slot's helper (all but Validation, the output contract's).
func (p *Plan) Tiers(st Status) record.Isolation {
	var iso record.Isolation
	st.Into(&iso)
	iso.Mode = p.Mode
	iso.Quota = p.quota
	iso.Rlimits = "prlimit while stopped at exec (ptrace)"
	iso.Memory = p.memory
	switch {
	case p.Root:
		iso.User = fmt.Sprintf("uid per slot from %d", p.UIDFirst)
		iso.Network = "network namespace (loopback only)"
		iso.Tree = "pid namespace (kill -1 from its init)"
	case p.userNS:
		iso.User = fmt.Sprintf("off: worker is not root (steps run as its uid %d, root of a user namespace without capabilities)", os.Geteuid())
		iso.Network = "network namespace (loopback only, in a user namespace)"
		iso.Tree = "pid namespace (kill -1 from its init, in a user namespace)"
	default:
		iso.User = fmt.Sprintf("off: worker is not root (steps run as uid %d)", os.Geteuid())
		iso.Network = "off: no network namespace (no root, no user namespace)"
		if strings.Contains(iso.Landlock, "tcp denied") {
			iso.Network = "landlock only (tcp denied; other protocols open)"
		}
		iso.Tree = "process group + subreaper (no pid namespace)"
	}
	return iso
}

// Into copies the tiers a helper reports into a record's.
func (st Status) Into(iso *record.Isolation) {
	iso.Root, iso.Landlock, iso.Seccomp = st.Root, st.Landlock, st.Seccomp
	iso.IPC, iso.Keys, iso.FDs = st.IPC, st.Keys, st.Descriptors
}

// Missing lists the tiers iso (from Tiers) lacks, each with why, in the
// order the worker's log line and refusal give them.
func (p *Plan) Missing(iso record.Isolation) []string {
	var missing []string
	if !p.Root {
		missing = append(missing, "user (worker is not root: steps run as the worker's uid)")
	}
	if !p.quotaOK {
		missing = append(missing, "quota ("+p.quota+")")
	}
	if !p.cgroups {
		missing = append(missing, "memory ("+p.memory+")")
	}
	if !p.Root && !p.userNS {
		missing = append(missing, "namespaces (no root and no user namespace: no network or PID namespace)")
	}
	for _, t := range []struct{ name, status string }{
		{"root", iso.Root}, {"landlock", iso.Landlock}, {"seccomp", iso.Seccomp},
		{"ipc", iso.IPC}, {"keys", iso.Keys},
	} {
		if strings.HasPrefix(t.status, "off") {
			missing = append(missing, t.name+" ("+t.status+")")
		}
	}
	return missing
}

// Verdict is nil when the worker may start with missing tiers (none, or
// best-effort mode); else an error that matches ErrStrict and names them.
func (p *Plan) Verdict(missing []string) error {
	if len(missing) == 0 || p.Mode != Strict {
		return nil
	}
	return fmt.Errorf("%w: %s (run as root with CAP_SYS_ADMIN, or pass -isolation=best-effort to run anyway)", ErrStrict, strings.Join(missing, "; "))
}

// CheckMode refuses a mode other than Strict and BestEffort.
func CheckMode(mode string) error {
	if mode != Strict && mode != BestEffort {
		return fmt.Errorf("isolation %q: want %q or %q", mode, Strict, BestEffort)
	}
	return nil
}

// EgressTier words the network tier of a networked run: its proxy at
// proxyURL, what it may reach (allow), and its bounds.
func EgressTier(proxyURL string, allow []string, maxBytes int64, maxConns int, idle time.Duration) string {
	to := "nothing (no -egress-allow)"
	if len(allow) > 0 {
		to = strings.Join(allow, ", ")
	}
	return fmt.Sprintf("own network namespace (loopback only); out only through the worker's HTTP proxy at %s, to %s; refused ranges and the worker's Redis refused; no DNS, no UDP; %d bytes at most, request heads of 64 KiB, %d connections at once, closed after %s idle", proxyURL, to, maxBytes, maxConns, idle)
}

// ErrStrict is matched by the error of a strict Verdict that found a tier
// missing.
var ErrStrict = errors.New("isolation tier unavailable")

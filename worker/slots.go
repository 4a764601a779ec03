//go:build linux

package worker

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/airlock-run/airlock/internal/sandbox"
)

// startSlots makes the worker's slots: for each, a uid (as root), a
// workspace area and a control group, one after the other (each is quick),
// then its sandbox helper. Helpers start in parallel: each is a re-exec of
// this binary that builds its namespaces and view, tens of milliseconds
// that would otherwise add up slot by slot before the worker is ready.
// Without root, the first slot's helper starts alone first: it finds out
// whether user namespaces are available to the others.
func (w *Worker) startSlots(root bool) error {
	w.slots = make(chan *slot, w.cfg.Concurrency)
	slots := make([]*slot, 0, w.cfg.Concurrency)
	cfgs := make([]sandbox.SlotConfig, 0, w.cfg.Concurrency)
	release := func() {
		for _, s := range slots {
			if s.area != nil {
				s.area.Close()
			}
			if s.uid != nil {
				s.uid.Release()
			}
		}
	}
	for i := 0; i < w.cfg.Concurrency; i++ {
		s, cfg, err := w.prepareSlot(i, root)
		if s != nil {
			slots = append(slots, s)
		}
		if err != nil {
			release()
			return err
		}
		cfgs = append(cfgs, cfg)
	}
	errs := make([]error, len(slots))
	start := func(i int) {
		cfg := cfgs[i]
		if !root && (i == 0 || w.userNS) {
			cfg.Namespaces, cfg.UserNS = true, true
		}
		slots[i].box, cfg, errs[i] = w.startHelper(cfg)
		cfgs[i] = cfg
		if i == 0 {
			w.userNS = cfg.UserNS
		}
		if errs[i] != nil {
			errs[i] = fmt.Errorf("worker: slot %d: %w", i, errs[i])
		} else if w.cfg.Policy.AllowNetwork {
			slots[i].netCfg = cfg
			slots[i].netCfg.Egress = slots[i].serveEgress
		}
	}
	first := 0
	if !root {
		start(0) // alone: the others follow what it found
		first = 1
	}
	var wg sync.WaitGroup
	for i := first; i < len(slots); i++ {
		wg.Add(1)
		go func() { defer wg.Done(); start(i) }()
	}
	wg.Wait()
	for _, cfg := range cfgs {
		// Namespaces are reported as the least of the slots have them.
		w.userNS = w.userNS && cfg.UserNS
	}
	if err := errors.Join(errs...); err != nil {
		for _, s := range slots {
			if s.box != nil {
				s.box.Close()
			}
		}
		release()
		return err
	}
	for _, s := range slots {
		w.all = append(w.all, s)
		w.slots <- s
	}
	return nil
}

// prepareSlot leases slot i's uid (as root) and makes its workspace area
// and control group; it returns the slot, with what it holds so far also
// on error, and its sandbox configuration.
func (w *Worker) prepareSlot(i int, root bool) (*slot, sandbox.SlotConfig, error) {
	s := &slot{uidN: os.Geteuid()}
	cfg := sandbox.SlotConfig{UID: -1, GID: -1, Landlock: *w.cfg.Landlock, Grace: w.cfg.Grace, Stderr: os.Stderr, Binds: w.binds,
		Restarted: func() { w.helperRestarts.Add(1) }}
	name := fmt.Sprintf("slot-%d", i)
	if root {
		lease, err := sandbox.LeaseUID(w.cfg.UIDLockDir, w.cfg.UIDFirst, w.cfg.UIDCount)
		if err != nil {
			return nil, cfg, fmt.Errorf("worker: slot %d: %w", i, err)
		}
		s.uid, s.uidN = lease, lease.UID
		cfg.UID, cfg.GID, cfg.Namespaces = lease.UID, lease.UID, true
		name = fmt.Sprintf("slot-%d", lease.UID)
	}
	area, err := w.ws.Slot(name, s.uidN, s.uidN)
	if err != nil {
		return s, cfg, fmt.Errorf("worker: slot %d: %w", i, err)
	}
	s.area, cfg.Workspace = area, area.Dir()
	if w.cgroups != nil {
		g, err := w.cgroups.NewGroup(name)
		if err != nil {
			return s, cfg, fmt.Errorf("worker: slot %d: %w", i, err)
		}
		cfg.Cgroup, s.group = g, g
	}
	return s, cfg, nil
}

// startHelper starts a slot's sandbox helper, falling back (best effort)
// to what the machine allows: without the steps' own root, then without
// a user namespace. It returns the configuration that started.
func (w *Worker) startHelper(cfg sandbox.SlotConfig) (*sandbox.Slot, sandbox.SlotConfig, error) {
	cfg.View = cfg.Namespaces
	box, err := sandbox.NewSlot(cfg)
	if err != nil && cfg.View && w.cfg.Isolation == BestEffort {
		w.log.Warn().Err(err).Msg("cannot build the steps' own root: steps see the host's filesystem, as Landlock allows")
		cfg.View = false
		box, err = sandbox.NewSlot(cfg)
	}
	if err != nil && cfg.UserNS {
		w.log.Warn().Err(err).Msg("no user namespace: steps run without PID and network namespaces")
		cfg.Namespaces, cfg.UserNS, cfg.View = false, false, false
		box, err = sandbox.NewSlot(cfg)
	}
	return box, cfg, err
}

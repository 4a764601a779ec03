//go:build linux

package worker

import (
	"errors"
	"fmt"
	"os"

	"github.com/airlock-run/airlock/internal/isolation/sandbox"
)

// startSlots makes the worker's slots: for each, a uid (as root), a
// workspace area and a control group, one after the other (each is quick),
// then their sandbox helpers, which the isolation plan starts in parallel
// and falls back with (sandbox.Plan.StartHelpers).
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
	boxes, cfgs, errs := w.plan.StartHelpers(cfgs)
	for i, s := range slots {
		s.box = boxes[i]
		if errs[i] != nil {
			errs[i] = fmt.Errorf("worker: slot %d: %w", i, errs[i])
		} else if w.cfg.Policy.AllowNetwork {
			s.netCfg = cfgs[i]
			s.netCfg.Egress = s.serveEgress
		}
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

//go:build linux

package cgroup

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
)

// Group is the control group of one slot. Its methods are not safe for
// concurrent use: a slot runs one step at a time.
type Group struct {
	version Version
	dirs    []string // the group in each hierarchy, as Manager.dirs

	procs []*os.File // v1: tasks, v2: cgroup.procs of each hierarchy, for the slot's helper

	memMax  *os.File // v1 memory.limit_in_bytes, v2 memory.max
	memsw   *os.File // v1 memory.memsw.limit_in_bytes; nil without swap accounting
	peak    *os.File // v1 memory.max_usage_in_bytes, v2 memory.peak; nil when absent
	oom     *os.File // v1 memory.oom_control, v2 memory.events
	pidsMax *os.File
	// pidsEvents is pids.events, whose "max" counts the forks the pids
	// limit refused; nil where the kernel has none.
	pidsEvents *os.File
	usage      *os.File // v1 memory.usage_in_bytes, for Stale; nil on v2
	// spare is the slot's other memory group (v1), made by the first
	// Renew: the one the slot left, with what earlier steps left in it.
	spare *memGroup

	peakResets bool // writing to peak resets it (v1; v2 from Linux 6.12)
	memory     int64
	pids       int

	closeOnce sync.Once
}

// Mark is what Group.Mark read before a step.
type Mark struct {
	oomKills, pidsRefused int64
}

// Usage is what a step held, read after it.
type Usage struct {
	// PeakBytes is the group's peak memory during the step (what its
	// processes held, tmpfs and page cache included); 0 when unknown.
	// On cgroup v1 it holds of earlier steps at most StaleBytes, besides
	// the files they left in the workspace (see Stale).
	PeakBytes int64
	// OOMKills counts the processes the kernel killed because the group
	// reached its memory limit.
	OOMKills int64
	// PidsRefused counts the forks the group's pids limit refused; -1
	// when the kernel does not say (no pids.events).
	PidsRefused int64
}

// NewGroup creates the group of a slot, named slot-<name>, empty and
// unlimited until Set.
func (m *Manager) NewGroup(name string) (*Group, error) {
	g := &Group{version: m.version}
	for _, parent := range m.dirs {
		dir := filepath.Join(parent, "slot-"+name)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			g.Close()
			return nil, fmt.Errorf("cgroup: %w", err)
		}
		g.dirs = append(g.dirs, dir)
	}
	if err := g.open(); err != nil {
		g.Close()
		return nil, fmt.Errorf("cgroup %s: %w", g.dirs[0], err)
	}
	m.mu.Lock()
	m.groups = append(m.groups, g)
	m.mu.Unlock()
	return g, nil
}

func (g *Group) open() error {
	var err error
	join := "cgroup.procs"
	if g.version == V1 {
		join = "tasks" // a thread: the helper's spawner
	}
	for _, d := range g.dirs {
		f, err := os.OpenFile(filepath.Join(d, join), os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		g.procs = append(g.procs, f)
	}
	mem, pids := g.dirs[0], g.dirs[0]
	if g.version == V1 {
		pids = g.dirs[1]
		if g.memMax, err = rw(mem, "memory.limit_in_bytes"); err != nil {
			return err
		}
		// memory+swap: absent, or refusing writes (ENODEV), without swap
		// accounting; there is then no swap to limit.
		if g.memsw, err = rw(mem, "memory.memsw.limit_in_bytes"); err == nil {
			if werr := writeAt(g.memsw, "-1"); werr != nil {
				g.memsw.Close()
				g.memsw = nil
			}
		}
		if g.peak, err = rw(mem, "memory.max_usage_in_bytes"); err != nil {
			return err
		}
		g.peakResets = true
		if g.oom, err = os.Open(filepath.Join(mem, "memory.oom_control")); err != nil {
			return err
		}
		if g.usage, err = os.Open(filepath.Join(mem, "memory.usage_in_bytes")); err != nil {
			return err
		}
		_ = write(filepath.Join(mem, "memory.swappiness"), "0")
	} else {
		if g.memMax, err = rw(mem, "memory.max"); err != nil {
			return err
		}
		if err := write(filepath.Join(mem, "memory.swap.max"), "0"); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if g.peak, err = rw(mem, "memory.peak"); err == nil {
			// Linux 6.12+: a write resets the peak seen through this
			// descriptor; before, the peak is the group's since creation,
			// which is not a step's: it is not reported.
			_, werr := g.peak.WriteString("reset\n")
			g.peakResets = werr == nil
		}
		if g.oom, err = os.Open(filepath.Join(mem, "memory.events")); err != nil {
			return err
		}
	}
	if g.pidsMax, err = rw(pids, "pids.max"); err != nil {
		return err
	}
	if f, err := os.Open(filepath.Join(pids, "pids.events")); err == nil {
		g.pidsEvents = f
	}
	return nil
}

func rw(dir, name string) (*os.File, error) {
	return os.OpenFile(filepath.Join(dir, name), os.O_RDWR, 0)
}

// Join returns the descriptors through which the slot's helper puts steps
// in the group, one per hierarchy; the caller must not close them.
//
// On cgroup v1 they are the groups' tasks files: the helper writes the id
// of its spawner thread once, and every step it forks is born in the group
// (no migration per step: a migration waits for an RCU grace period, ~10
// ms on an idle machine). The thread is not the helper's main thread, so
// the helper's own memory stays charged to the worker's group; it counts
// as one task against the pids limit (Set adds it). On cgroup v2, where a
// process's threads share one group, they are cgroup.procs files: the
// helper moves each step while it is stopped at exec (ThreadJoin is false).
func (g *Group) Join() []*os.File { return g.procs }

// ThreadJoin reports whether the helper joins its spawner thread (v1)
// rather than each step (v2).
func (g *Group) ThreadJoin() bool { return g.version == V1 }

// Set limits the group to memory bytes (no swap) and pids processes and
// threads of the steps (on v1, the spawner thread is added). It writes only
// what changed since the last call.
func (g *Group) Set(memory int64, pids int) error {
	if g.ThreadJoin() {
		pids++ // the helper's spawner thread
	}
	if memory != g.memory {
		if err := g.setMemory(memory); err != nil {
			g.memory = 0 // unknown: write again next time
			return fmt.Errorf("cgroup: memory limit %d: %w", memory, err)
		}
		g.memory = memory
	}
	if pids != g.pids {
		if err := writeAt(g.pidsMax, strconv.Itoa(pids)); err != nil {
			g.pids = 0
			return fmt.Errorf("cgroup: pids limit %d: %w", pids, err)
		}
		g.pids = pids
	}
	return nil
}

func (g *Group) setMemory(n int64) error {
	v := strconv.FormatInt(n, 10)
	if g.version == V2 {
		return writeAt(g.memMax, v)
	}
	// v1: memory+swap must stay at or above memory: raise it first, then
	// set memory, then bring memory+swap down to it (no swap).
	if g.memsw != nil {
		if err := writeAt(g.memsw, "-1"); err != nil {
			return err
		}
	}
	err := writeAt(g.memMax, v)
	if errors.Is(err, syscall.EBUSY) {
		// What the group still holds (page cache of an earlier task)
		// could not be reclaimed below the new limit: drop it and retry.
		_ = write(filepath.Join(g.dirs[0], "memory.force_empty"), "0")
		err = writeAt(g.memMax, v)
	}
	if err != nil {
		return err
	}
	if g.memsw != nil {
		return writeAt(g.memsw, v)
	}
	return nil
}

// Mark resets the group's peak and reads its OOM kill count, before a
// step.
func (g *Group) Mark() (Mark, error) {
	if g.peak != nil && g.peakResets {
		reset := "0"
		if g.version == V2 {
			reset = "reset\n"
		}
		if err := writeAt(g.peak, reset); err != nil {
			return Mark{}, fmt.Errorf("cgroup: reset peak: %w", err)
		}
	}
	n, err := g.oomKills()
	if err != nil {
		return Mark{}, err
	}
	return Mark{oomKills: n, pidsRefused: g.pidsRefused()}, nil
}

// Usage reads what the group held since m.
func (g *Group) Usage(m Mark) (Usage, error) {
	var u Usage
	n, err := g.oomKills()
	if err != nil {
		return u, err
	}
	u.OOMKills = n - m.oomKills
	u.PidsRefused = -1
	if now := g.pidsRefused(); now >= 0 && m.pidsRefused >= 0 {
		u.PidsRefused = now - m.pidsRefused
	}
	if g.peak != nil && g.peakResets {
		if u.PeakBytes, err = readInt(g.peak); err != nil {
			return u, fmt.Errorf("cgroup: peak: %w", err)
		}
	}
	return u, nil
}

// Hits reports which limits the group reached since m: forks its pids
// limit refused, processes its memory limit killed. Two small reads, for
// a poll while a step runs (Usage reads them once it ended).
func (g *Group) Hits(m Mark) (pids, memory bool) {
	if now := g.pidsRefused(); now >= 0 && m.pidsRefused >= 0 {
		pids = now > m.pidsRefused
	}
	if n, err := g.oomKills(); err == nil {
		memory = n > m.oomKills
	}
	return pids, memory
}

// oomKills reads the oom_kill counter of memory.oom_control (v1) or
// memory.events (v2).
func (g *Group) oomKills() (int64, error) {
	var buf [512]byte
	n, err := g.oom.ReadAt(buf[:], 0)
	if n == 0 && err != nil {
		return 0, fmt.Errorf("cgroup: read %s: %w", g.oom.Name(), err)
	}
	for _, line := range bytes.Split(buf[:n], []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("oom_kill ")); ok {
			return strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
		}
	}
	return 0, fmt.Errorf("cgroup: %s has no oom_kill counter (kernel older than 4.13?)", g.oom.Name())
}

// pidsRefused reads the "max" counter of pids.events: forks refused at
// the pids limit; -1 when unknown.
func (g *Group) pidsRefused() int64 {
	if g.pidsEvents == nil {
		return -1
	}
	var buf [128]byte
	n, _ := g.pidsEvents.ReadAt(buf[:], 0)
	for _, line := range bytes.Split(buf[:n], []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("max ")); ok {
			if c, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64); err == nil {
				return c
			}
		}
	}
	return -1
}

func readInt(f *os.File) (int64, error) {
	var buf [32]byte
	n, err := f.ReadAt(buf[:], 0)
	if n == 0 && err != nil {
		return 0, err
	}
	return strconv.ParseInt(string(bytes.TrimSpace(buf[:n])), 10, 64)
}

// writeAt writes s at offset 0 of a control file kept open.
func writeAt(f *os.File, s string) error {
	_, err := f.WriteAt([]byte(s), 0)
	return err
}

// Close closes the group's descriptors and removes it; it fails while a
// process is still in it.
func (g *Group) Close() error {
	var err error
	g.closeOnce.Do(func() {
		for _, f := range append(g.procs, g.memMax, g.memsw, g.peak, g.oom, g.pidsMax, g.pidsEvents, g.usage) {
			if f != nil {
				f.Close()
			}
		}
		dirs := g.dirs
		if g.spare != nil {
			g.spare.close()
			dirs = append(dirs, g.spare.dir)
		}
		for _, d := range dirs {
			if rerr := os.Remove(d); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
				err = errors.Join(err, rerr)
			}
		}
	})
	return err
}

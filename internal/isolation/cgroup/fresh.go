//go:build linux

package cgroup

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// A step's memory peak is read from its slot's group, which also holds
// what earlier steps left charged to it: the page cache of the files they
// read (a task that read 300 MB from /usr leaves 300 MB), and kernel
// memory (dentries, inodes). Writing the peak resets it to the group's
// usage, not to zero, so that a trivial step after such a task reported
// the cache as its own, and a step near its limit reported the limit
// (the kernel reclaims the old cache only then).
//
// On cgroup v1 a slot therefore has two memory groups, slot-NAME and
// slot-NAME.spare, and its steps run in one of them. Before each step the
// slot reads the usage of the group (one read: the hot path's only cost).
// When it is above StaleBytes, and more than the workspace's files
// (shmem, the task's own, freed when its workspace is emptied) explain,
// the slot stops its helper, Renew empties the other group of what it
// still holds (memory.force_empty, reclaim of old clean cache: no task is
// in it) and makes it the slot's, and the next helper joins it. The cache
// just left behind is not dropped: it stays in the page cache, charged to
// the group left, where the next steps find it (a python3 that the task
// before loaded is not read from disk again); it is dropped when the slot
// comes back to that group, two renewals later, or reclaimed as any cache
// under memory pressure. No group is created per step or task: a slot
// has at most two, and no dying group is left to the kernel.
//
// Cgroup v2 is not covered: a step's peak there includes what earlier
// steps left (and is not reported before Linux 6.12).

// StaleBytes is how much memory a slot's group may hold, besides the
// workspace's files, before a step without moving to its spare group;
// it is also the most of earlier steps' memory a step's peak includes.
const StaleBytes = 4 << 20

// memGroup is the memory hierarchy's part of a v1 slot group.
type memGroup struct {
	dir                                    string
	tasks, memMax, memsw, peak, oom, usage *os.File
}

func (m *memGroup) close() {
	for _, f := range []*os.File{m.tasks, m.memMax, m.memsw, m.peak, m.oom, m.usage} {
		if f != nil {
			f.Close()
		}
	}
}

// current returns the memory group the slot's steps run in.
func (g *Group) current() *memGroup {
	return &memGroup{dir: g.dirs[0], tasks: g.procs[0], memMax: g.memMax, memsw: g.memsw, peak: g.peak, oom: g.oom, usage: g.usage}
}

func (g *Group) use(m *memGroup) {
	g.dirs[0], g.procs[0], g.memMax, g.memsw, g.peak, g.oom, g.usage = m.dir, m.tasks, m.memMax, m.memsw, m.peak, m.oom, m.usage
	g.memory = 0 // unknown: the next Set writes the limit
}

// Stale reports whether the group holds more than StaleBytes that no
// running step holds, besides the workspace's files: memory a next step's
// peak would count as its own. It is always false on cgroup v2. It reads
// one control file; memory.stat too when the usage is above StaleBytes.
func (g *Group) Stale() (bool, error) {
	if g.usage == nil {
		return false, nil
	}
	used, err := readInt(g.usage)
	if err != nil {
		return false, fmt.Errorf("cgroup: usage: %w", err)
	}
	if used <= StaleBytes {
		return false, nil
	}
	shmem, err := statValue(filepath.Join(g.dirs[0], "memory.stat"), "shmem")
	if err != nil {
		return false, err
	}
	return used-shmem > StaleBytes, nil
}

// Renew moves the slot's steps' memory accounting to its other memory
// group (cgroup v1), emptied first of what it still held; what the
// current group holds stays charged to it. The caller must have stopped
// the slot's helper (no process may be left in the group), and the next
// helper joins the group through Join's descriptors, which change. The
// limits are written again by the next Set.
func (g *Group) Renew() error {
	if g.version != V1 {
		return errors.New("cgroup: renew: cgroup v1 only")
	}
	next := g.spare
	if next == nil {
		var err error
		if next, err = openMemGroup(filepath.Join(filepath.Dir(g.dirs[0]), filepath.Base(g.dirs[0])+".spare")); err != nil {
			return err
		}
	} else if used, err := readInt(next.usage); err != nil || used > 0 {
		// What the group held two renewals ago: old cache, dropped now
		// (no task is in the group; clean pages are reclaimed, the rest
		// stays and counts).
		if err := write(filepath.Join(next.dir, "memory.force_empty"), "0"); err != nil {
			return fmt.Errorf("cgroup: empty %s: %w", next.dir, err)
		}
	}
	g.spare = g.current()
	g.use(next)
	return nil
}

// openMemGroup makes (or reopens) a v1 memory group at dir and opens its
// control files.
func openMemGroup(dir string) (*memGroup, error) {
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	m := &memGroup{dir: dir}
	fail := func(err error) (*memGroup, error) {
		m.close()
		_ = os.Remove(dir)
		return nil, fmt.Errorf("cgroup %s: %w", dir, err)
	}
	var err error
	if m.tasks, err = os.OpenFile(filepath.Join(dir, "tasks"), os.O_WRONLY, 0); err != nil {
		return fail(err)
	}
	if m.memMax, err = rw(dir, "memory.limit_in_bytes"); err != nil {
		return fail(err)
	}
	if m.memsw, err = rw(dir, "memory.memsw.limit_in_bytes"); err == nil {
		if werr := writeAt(m.memsw, "-1"); werr != nil {
			m.memsw.Close()
			m.memsw = nil
		}
	}
	if m.peak, err = rw(dir, "memory.max_usage_in_bytes"); err != nil {
		return fail(err)
	}
	if m.oom, err = os.Open(filepath.Join(dir, "memory.oom_control")); err != nil {
		return fail(err)
	}
	if m.usage, err = os.Open(filepath.Join(dir, "memory.usage_in_bytes")); err != nil {
		return fail(err)
	}
	_ = write(filepath.Join(dir, "memory.swappiness"), "0")
	return m, nil
}

// statValue reads one counter of a memory.stat file.
func statValue(path, key string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("cgroup: %w", err)
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte(key+" ")); ok {
			return strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
		}
	}
	return 0, fmt.Errorf("cgroup: %s has no %s", path, key)
}

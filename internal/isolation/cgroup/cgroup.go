//go:build linux

package cgroup

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// Version is the cgroup layout in use.
type Version int

// Versions.
const (
	None Version = iota // no usable cgroup: the rlimit fallback applies
	V1                  // cgroup v1 memory and pids hierarchies
	V2                  // the cgroup v2 unified hierarchy
)

func (v Version) String() string {
	switch v {
	case V1:
		return "cgroup v1"
	case V2:
		return "cgroup v2"
	}
	return "none"
}

// ErrUnavailable is matched by the error of Open when the worker can use
// no cgroup: the error says why.
var ErrUnavailable = errors.New("no usable cgroup")

// Manager holds the worker's parent group of its slots' groups.
type Manager struct {
	version Version
	// dirs are the parent group in each hierarchy: v1 memory then pids,
	// or the one v2 directory.
	dirs []string

	mu     sync.Mutex
	groups []*Group
}

// Options say where a Manager looks.
type Options struct {
	// Root is where cgroup hierarchies are mounted; default /sys/fs/cgroup.
	Root string
	// Name is the name of the parent group the Manager creates below the
	// worker's own group; default airlock-<pid>.
	Name string
}

// Open finds a cgroup layout the worker can use and creates its parent
// group there, after removing the empty groups that a killed worker left
// (airlock-* groups with no process). It tries cgroup v2 first, then v1.
func Open(o Options) (*Manager, error) {
	if o.Root == "" {
		o.Root = "/sys/fs/cgroup"
	}
	if o.Name == "" {
		o.Name = fmt.Sprintf("airlock-%d", os.Getpid())
	}
	own, err := ownGroups()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	m, errV2 := openV2(o, own)
	if errV2 == nil {
		return m, nil
	}
	m, errV1 := openV1(o, own)
	if errV1 == nil {
		return m, nil
	}
	return nil, fmt.Errorf("%w: v2: %v; v1: %v", ErrUnavailable, errV2, errV1)
}

// Version is the layout in use.
func (m *Manager) Version() Version { return m.version }

// Describe says where the slots' groups are, for the isolation tiers.
func (m *Manager) Describe() string {
	if m.version == V1 {
		return fmt.Sprintf("cgroup v1 memory and pids, one group per slot under %s and %s", m.dirs[0], m.dirs[1])
	}
	return fmt.Sprintf("cgroup v2 memory and pids, one group per slot under %s", m.dirs[0])
}

// ownGroups reads /proc/self/cgroup: the worker's group in each hierarchy,
// by controller name ("" for v2's unified hierarchy).
func ownGroups() (map[string]string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			out[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out, nil
}

// v2Mount finds where the unified hierarchy is mounted: root itself when
// it is cgroup2, else the first cgroup2 mount in mountinfo.
func v2Mount(root string) (string, error) {
	if isCgroup2(root) {
		return root, nil
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent maj:min root mountpoint options... - fstype source super
		fields := strings.Fields(sc.Text())
		for i, fld := range fields {
			if fld == "-" && i+1 < len(fields) && fields[i+1] == "cgroup2" && len(fields) > 4 {
				return unescapeMount(fields[4]), nil
			}
		}
	}
	return "", errors.New("no cgroup2 mount")
}

func isCgroup2(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "cgroup.controllers"))
	return err == nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space...).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func openV2(o Options, own map[string]string) (*Manager, error) {
	rel, ok := own[""]
	if !ok {
		return nil, errors.New("the worker is in no cgroup v2 group")
	}
	mnt, err := v2Mount(o.Root)
	if err != nil {
		return nil, err
	}
	ownDir := filepath.Join(mnt, rel)
	ctrl, err := os.ReadFile(filepath.Join(ownDir, "cgroup.controllers"))
	if err != nil {
		return nil, err
	}
	have := strings.Fields(string(ctrl))
	for _, c := range []string{"memory", "pids"} {
		if !contains(have, c) {
			return nil, fmt.Errorf("%s: controller %s not available (delegate it: systemd Delegate=yes, or a container with its own cgroup namespace)", ownDir, c)
		}
	}
	if err := enableV2(ownDir); err != nil {
		return nil, err
	}
	sweep([]string{ownDir})
	dir := filepath.Join(ownDir, o.Name)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, err
	}
	if err := write(filepath.Join(dir, "cgroup.subtree_control"), "+memory +pids"); err != nil {
		_ = os.Remove(dir)
		return nil, err
	}
	return &Manager{version: V2, dirs: []string{dir}}, nil
}

// enableV2 hands the memory and pids controllers down from dir, moving the
// worker into the leaf dir/airlock-worker first when dir holds processes.
func enableV2(dir string) error {
	sub, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	if err != nil {
		return err
	}
	if on := strings.Fields(string(sub)); contains(on, "memory") && contains(on, "pids") {
		return nil
	}
	procs, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(procs)) > 0 {
		leaf := filepath.Join(dir, "airlock-worker")
		if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
		if err := write(filepath.Join(leaf, "cgroup.procs"), strconv.Itoa(os.Getpid())); err != nil {
			return fmt.Errorf("move the worker into %s: %w", leaf, err)
		}
	}
	if err := write(filepath.Join(dir, "cgroup.subtree_control"), "+memory +pids"); err != nil {
		return fmt.Errorf("enable memory and pids in %s (other processes in the worker's group?): %w", dir, err)
	}
	return nil
}

func openV1(o Options, own map[string]string) (*Manager, error) {
	var dirs []string
	for _, c := range []string{"memory", "pids"} {
		rel, ok := own[c]
		if !ok {
			return nil, fmt.Errorf("no %s hierarchy", c)
		}
		base := filepath.Join(o.Root, c)
		if _, err := os.Stat(filepath.Join(base, "cgroup.procs")); err != nil {
			return nil, fmt.Errorf("%s hierarchy not mounted at %s", c, base)
		}
		parent := filepath.Join(base, rel)
		if _, err := os.Stat(parent); err != nil {
			// A cgroup namespace or a bind of a sub-tree: the hierarchy's
			// root is the worker's group.
			parent = base
		}
		dirs = append(dirs, parent)
	}
	sweep(dirs)
	var made []string
	for _, parent := range dirs {
		dir := filepath.Join(parent, o.Name)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			for _, d := range made {
				_ = os.Remove(d)
			}
			return nil, err
		}
		made = append(made, dir)
	}
	return &Manager{version: V1, dirs: made}, nil
}

// sweep removes the empty airlock-<pid> groups (and their empty slot
// groups) that a killed worker left below each parent: those whose worker
// process is gone. Another live worker's are left alone.
func sweep(parents []string) {
	for _, p := range parents {
		ents, err := os.ReadDir(p)
		if err != nil {
			continue
		}
		for _, e := range ents {
			pid, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "airlock-"))
			if !e.IsDir() || !strings.HasPrefix(e.Name(), "airlock-") || err != nil || pid <= 0 {
				continue
			}
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
				continue // its worker lives (or the pid was reused: swept next time)
			}
			dir := filepath.Join(p, e.Name())
			kids, _ := os.ReadDir(dir)
			for _, k := range kids {
				if k.IsDir() {
					_ = os.Remove(filepath.Join(dir, k.Name())) // EBUSY while in use
				}
			}
			_ = os.Remove(dir)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// write writes s to a control file.
func write(path, s string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(s)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Close removes the slots' groups and the parent group. Groups still
// holding a process (a helper that did not stop) stay, and are swept by
// the next worker.
func (m *Manager) Close() error {
	m.mu.Lock()
	groups := m.groups
	m.groups = nil
	m.mu.Unlock()
	var errs []error
	for _, g := range groups {
		if err := g.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, d := range m.dirs {
		if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrNoFreeUID is returned when every uid of the range is held by a slot.
var ErrNoFreeUID = errors.New("no free uid in the range")

// UIDLease is a uid held by one slot of one worker process: an exclusive
// flock on a file per uid, so that two workers on one machine (or two test
// binaries) never share a uid. The kernel drops the lock when the process
// dies, so a crashed worker's uids come free by themselves.
type UIDLease struct {
	UID  int
	file *os.File
}

// LeaseUID takes the first free uid in [first, first+count): one whose
// lock no other process holds and that no process runs as.
func LeaseUID(lockDir string, first, count int) (*UIDLease, error) {
	if err := os.MkdirAll(lockDir, 0o700); err != nil {
		return nil, fmt.Errorf("uid lock dir: %w", err)
	}
	for uid := first; uid < first+count; uid++ {
		f, err := os.OpenFile(filepath.Join(lockDir, "uid-"+strconv.Itoa(uid)+".lock"), os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return nil, err
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				continue
			}
			return nil, err
		}
		if uidInUse(uid) {
			// Another worker with another lock directory, or anything
			// else on the machine, runs as this uid: a slot must own its
			// uid alone.
			f.Close()
			continue
		}
		_ = f.Truncate(0)
		_, _ = f.WriteString(strconv.Itoa(os.Getpid()) + "\n")
		return &UIDLease{UID: uid, file: f}, nil
	}
	return nil, fmt.Errorf("%w [%d, %d): lock files in %s", ErrNoFreeUID, first, first+count, lockDir)
}

// uidInUse reports whether a process of the machine runs as uid (real,
// effective, saved or filesystem).
func uidInUse(uid int) bool {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return false
	}
	want := strconv.Itoa(uid)
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
				if slices.Contains(strings.Fields(rest), want) {
					return true
				}
				break
			}
		}
	}
	return false
}

// Release frees the uid.
func (l *UIDLease) Release() error { return l.file.Close() }

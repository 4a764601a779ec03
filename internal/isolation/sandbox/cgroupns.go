//go:build linux

package sandbox

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// enterSlotCgroup runs on the spawner's thread before setup, with the
// worker's privileges. On cgroup v1 the thread joins the slot's group (its
// tasks files), so that every step it forks is born there. Then, unless
// steps are to be moved into a group one by one (v2), the thread takes a
// cgroup namespace of its own, rooted where it now is, which its steps
// inherit: their /proc/self/cgroup reads "/" in every hierarchy instead
// of the worker's path (its pid, the host's layout), and other groups,
// the helper's own included, read as a relative path of ".." only. The
// worker still sets the group's limits from outside, by path.
func (h *helper) enterSlotCgroup() {
	if h.cfg.CgroupThread {
		if unix.Gettid() == unix.Getpid() {
			h.cgroupErr = "the spawner runs on the main thread; it may not join the slot's cgroup"
			return
		}
		id := []byte(strconv.Itoa(unix.Gettid()))
		for _, fd := range h.cgroup {
			if _, err := unix.Write(fd, id); err != nil {
				h.cgroupErr = "join the slot's cgroup: " + err.Error()
				return
			}
		}
	}
	if !h.cfg.Namespace || (len(h.cgroup) > 0 && !h.cfg.CgroupThread) {
		// No privilege for a namespace; or (v2) steps are moved into the
		// group after fork, which a namespace rooted elsewhere would show
		// as a relative path, or forbid (nsdelegate).
		return
	}
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
		fmt.Fprintf(os.Stderr, "airlock slot helper: no cgroup namespace for steps (they see the worker's cgroup path): %v\n", err)
	}
}

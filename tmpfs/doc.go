// Package tmpfs provides the per-task workspace: a directory with in/, out/
// and tmp/ below it, owned by the uid a task's steps run as, and emptied
// when the task ends.
//
// Each concurrency slot has one workspace directory (Slot), at a path that
// never changes, which its tasks use in turn: a sandbox can bind it into
// its steps' view once. When the worker may mount (it has CAP_SYS_ADMIN),
// that directory is a tmpfs, mounted once per slot and resized to each
// task's workspace quota, so the kernel enforces the quota (a write past it
// fails with ENOSPC) and what a step writes takes memory (or swap), never
// the filesystem below the root; the operator's workspace maximum times the
// slots must fit in memory. Otherwise it is a plain directory and the
// quota is checked by scanning it after each step (Workspace.Usage).
// Manager.Mechanism says which.
//
// Everything below a workspace was written by untrusted code. The reads of
// this package (ReadFile, List, Usage) never follow a symbolic link, never
// leave the workspace, never block on a FIFO and never read without a bound.
//
// The layout below a Manager's root is
//
//	root/.lock           flock held by the live Manager; holds its pid
//	root/<slot>/         one per concurrency slot, mode 0711
//	root/<slot>/ws/      the slot's workspace (Slot.Dir), mode 0700, owned by the step uid
//
// A worker that is killed leaves its workspaces, and with tmpfs their mounts,
// behind; the next Manager on the same root sweeps them (New, Sweep).
//
// It builds on Linux only; elsewhere the package is empty.
package tmpfs

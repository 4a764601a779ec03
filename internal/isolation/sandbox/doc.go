// Package sandbox confines the steps of a task. Each concurrency slot of a
// worker owns a long-lived helper: a re-exec of the worker binary, started
// once, that is PID 1 of its own PID, mount, IPC, UTS and network
// namespaces, builds the steps' view of the filesystem there and
// pivot_roots into it (see view.go), runs as the slot's own unprivileged
// uid, and forks every step from one thread confined by its own session
// keyring, no_new_privs, Landlock and a seccomp filter (seccomp.go). It
// stops each new step at exec (ptrace), applies the rlimits with prlimit(2)
// and lets it go, so limits hold from the first instruction at the price
// of one fork/exec. When a step ends, kill(-1) from the namespace's init
// ends everything it left, and the IPC objects it made are removed.
//
// The package also decides a worker's isolation (Plan, isolation.go): the
// fallback ladder its helpers start by, the wording of each tier in the
// run record, the missing tiers and the strict verdict. The view is one
// list of operations (viewOps) run by one fail-fast loop.
//
// It builds on Linux only; elsewhere the package is empty.
package sandbox

// Package cgroup gives each slot of a worker a control group of its own,
// in which the kernel counts and limits what the slot's steps really hold:
// anonymous memory, tmpfs, shm and memfd pages, the page cache of their
// writes (the memory controller), and their processes and threads (the
// pids controller).
//
// Two layouts are supported, found at Open:
//
//   - cgroup v2, where the worker's own group has the memory and pids
//     controllers (a systemd unit with Delegate=yes, a container with a
//     cgroup namespace of its own and a writable /sys/fs/cgroup): the worker
//     moves itself into a leaf <own>/airlock-worker when its group holds
//     processes (cgroup v2 allows no process in a group whose controllers
//     are handed down), and makes <own>/airlock-<pid>/slot-<name>.
//   - cgroup v1, where the memory and pids hierarchies are mounted and
//     writable (root on a host that boots with v1, as the machines this
//     project is tested on): <hierarchy>/<own>/airlock-<pid>/slot-<name> in
//     each of the two.
//
// The slot's helper stays in the worker's group: its own memory and
// threads are not the task's. Each step is moved into the slot's group
// while it is stopped at exec, before its first instruction, through
// cgroup.procs descriptors the worker opened (Group.Procs): the kernel
// checks the opener's credentials, so the helper, running as the slot's
// uid, needs no write access to the hierarchy.
//
// Limits are set per task (Group.Set); a step's peak and its OOM kills
// are read around it (Group.Mark, Group.Usage). Nothing is created or
// removed per task. On cgroup v1, a slot's steps move to its spare memory
// group when the one they ran in holds more than StaleBytes that earlier
// steps left, page cache mostly (Group.Stale, Group.Renew; fresh.go): a
// step's peak is its own.
//
// It builds on Linux only; elsewhere the package is empty.
package cgroup

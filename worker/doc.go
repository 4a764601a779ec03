// Package worker is Airlock's worker: an asynq server whose handler turns a
// task spec into confined steps in a fresh per-task workspace and stores an
// honest run record as the task's result.
//
// A Worker owns a fixed set of slots, one per unit of concurrency. Each slot
// has its own unprivileged uid, its own directory for workspaces, and a
// long-lived sandbox helper that runs the slot's steps (see
// internal/sandbox). The isolation tiers in force are probed at New,
// logged once, and copied into every run record.
//
// It builds on Linux only; elsewhere the package is empty.
package worker

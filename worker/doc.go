// Package worker is Airlock's worker: an asynq server whose handler turns a
// task spec into confined steps in a fresh per-task workspace and stores an
// honest run record as the task's result.
//
// A Worker owns a fixed set of slots, one per unit of concurrency. Each slot
// has its own unprivileged uid, its own directory for workspaces, and a
// long-lived sandbox helper that runs the slot's steps (see
// internal/isolation/sandbox). The isolation tiers in force are probed at New,
// logged once, and copied into every run record.
//
// The approval of a run's output is package approve's: the worker parks it
// (quiet: its record says the run's state), publishes a policy's
// acceptance inline through an approve.Promoter, serves the promote tasks
// front ends queue, and starts the approval lifecycle's clock
// (approve.Sweeper). A run's end is stored by one component, the
// completer: record, event and approval updates in one round trip.
//
// It builds on Linux only; elsewhere the package is empty.
package worker

// Package e2e tests the real worker and enqueue binaries against a real
// Redis: each test starts its own worker process on its own queue, enqueues
// a spec, and asserts the run record and that nothing survived or leaked.
//
// Its tests run on Linux only.
package e2e

// Command enqueue checks a task spec and enqueues it for Airlock's workers,
// optionally waiting for the run record:
//
//	enqueue [flags] SPEC.json|-
//
// Without -wait it prints the task id. With -wait it prints the run record
// as one JSON object once the run is parked or done. It exits 0 when the
// task was enqueued (or, with -wait, finished, whatever its verdict), 2 on
// bad flags or a rejected spec, 1 on any other error. See enqueue -h.
package main

import "github.com/airlock-run/airlock/internal/cli"

func main() { cli.Main(Run) }

//go:build !linux

package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "bench: Airlock's worker runs on Linux only (namespaces, cgroups, Landlock, seccomp); from other systems, enqueue and approve talk to it through Redis")
	os.Exit(1)
}

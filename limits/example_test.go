package limits_test

import (
	"errors"
	"fmt"

	"github.com/airlock-run/airlock/limits"
)

// Parse reads the value of a -limits flag.
func ExampleParse() {
	s, err := limits.Parse("-limits", "cpu_time=10s,memory=512MiB,processes=64")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(s)
	fmt.Println("memory bytes:", int64(s.Memory))
	fmt.Println("cpu time:", s.CPUTime)

	_, err = limits.Parse("-limits", "memory=512MiB,memroy=1GiB")
	fmt.Println(err)
	// Output:
	// cpu_time=10s,memory=512MiB,processes=64
	// memory bytes: 536870912
	// cpu time: 10s
	// -limits.memroy: unknown limit (known: cpu_time, file_size, memory, open_files, output, output_total, processes, workspace; or profile=browser)
}

// A spec may lower a limit, never raise it past the operator's maximum.
func ExamplePolicy_Resolve() {
	p := limits.DefaultPolicy()

	_, err := p.Resolve("limits", limits.Set{Memory: 8 << 30})
	fmt.Println(err)
	fmt.Println("invalid:", errors.Is(err, limits.ErrInvalid))

	s, err := p.Resolve("limits", limits.Set{Memory: 256 << 20})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("memory:", s.Memory, "processes:", s.Processes)
	// Output:
	// limits.memory: 8GiB is above the worker's maximum 4GiB (a spec may lower a limit, never raise it past the operator's maximum)
	// invalid: true
	// memory: 256MiB processes: 64
}

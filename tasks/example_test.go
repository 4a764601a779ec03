package tasks_test

import (
	"errors"
	"fmt"

	"github.com/airlock-run/airlock/limits"
	"github.com/airlock-run/airlock/tasks"
)

// Decoding is strict: a misspelt field is an error that names it.
func ExampleDecode() {
	_, err := tasks.Decode([]byte(`{
		"version": 1,
		"steps": [{"run": ["echo", "hi"], "tiemout": "5s"}]
	}`))
	fmt.Println(err)

	var fe *tasks.FieldError
	if errors.As(err, &fe) {
		fmt.Println("field:", fe.Field)
	}
	fmt.Println("invalid spec:", errors.Is(err, tasks.ErrInvalidSpec))
	// Output:
	// steps[0].tiemout: unknown field (known fields: name, run, stdin, timeout, env, cwd)
	// field: steps[0].tiemout
	// invalid spec: true
}

// Prepare fills in what a spec left out from the operator's policy.
func ExampleSpec_Prepare() {
	spec, err := tasks.Decode([]byte(`{
		"version": 1,
		"steps": [{"run": ["python3", "main.py"]}],
		"limits": {"memory": "256MiB"}
	}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := spec.Prepare(limits.DefaultPolicy()); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("queue:", spec.Queue)
	fmt.Println("timeout:", spec.Timeout)
	fmt.Println("step:", spec.Steps[0].Name)
	fmt.Println("max_retry:", *spec.MaxRetry)
	fmt.Println("memory:", spec.Limits.Memory)
	fmt.Println("processes:", spec.Limits.Processes)
	// Output:
	// queue: default
	// timeout: 1m0s
	// step: step-1
	// max_retry: 3
	// memory: 256MiB
	// processes: 64
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/tasks"
)

// Exit codes of Run.
const (
	exitOK       = 0 // enqueued, or finished with -wait whatever the verdict
	exitError    = 1 // anything else: usage, Redis, timeout
	exitRejected = 2 // the spec was rejected
)

// defaultRedisURL is the Redis used when neither -redis nor $REDIS_URL is.
const defaultRedisURL = "redis://127.0.0.1:6379/0"

// readSlack is how much larger than the payload cap the spec file may be:
// its JSON is re-encoded without whitespace before the cap applies.
const readSlack = 1 << 20

// options are the command's flags and argument.
type options struct {
	redisURL    string
	wait        waitMode
	waitTimeout time.Duration
	retention   time.Duration
	queue       string
	specPath    string
}

// Run runs the command with args (without the program name) and returns its
// exit code.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintln(stderr, "enqueue:", err)
		return exitError
	}
	if err := run(ctx, o, stdin, stdout, stderr); err != nil {
		var fe *tasks.FieldError
		if tasks.IsInvalid(err) && errors.As(err, &fe) {
			fmt.Fprintln(stderr, "enqueue: spec rejected:", fe.Error())
			return exitRejected
		}
		fmt.Fprintln(stderr, "enqueue:", err)
		return exitError
	}
	return exitOK
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("enqueue", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: enqueue [flags] SPEC.json   (- reads the spec from stdin)")
		fs.PrintDefaults()
	}
	redisURL := os.Getenv("REDIS_URL")
	if redisURL == "" {
		redisURL = defaultRedisURL
	}
	fs.StringVar(&o.redisURL, "redis", redisURL, "Redis URL (env REDIS_URL)")
	fs.Var(&o.wait, "wait", "wait and print the run record as one JSON object: -wait returns once the run is parked or final, -wait=final waits through the approval")
	fs.DurationVar(&o.waitTimeout, "wait-timeout", 5*time.Minute, "with -wait, give up after this long")
	fs.DurationVar(&o.retention, "retention", airlock.DefaultRetention, "how long the run record is kept after the task ends")
	fs.StringVar(&o.queue, "queue", "", "queue to enqueue in, overriding the spec's queue")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, err
		}
		return o, fmt.Errorf("%w (see -h)", err)
	}
	if fs.NArg() != 1 {
		return o, errors.New("want one argument, the spec file or - for stdin (see -h)")
	}
	if o.waitTimeout <= 0 {
		return o, errors.New("-wait-timeout: must be positive")
	}
	if o.retention <= 0 {
		return o, errors.New("-retention: must be positive (the run record must be kept to be read)")
	}
	o.specPath = fs.Arg(0)
	return o, nil
}

func run(ctx context.Context, o options, stdin io.Reader, stdout, stderr io.Writer) error {
	data, err := readSpec(o.specPath, stdin, tasks.DefaultMaxPayload)
	if err != nil {
		return err
	}
	spec, err := tasks.Decode(data)
	if err != nil {
		return err
	}
	if o.queue != "" {
		spec.Queue = o.queue
	}
	c, err := airlock.Dial(o.redisURL, airlock.ClientOptions{Retention: o.retention})
	if err != nil {
		return fmt.Errorf("-redis: %w", err)
	}
	defer c.Close()
	enq, err := c.Enqueue(ctx, spec)
	if err != nil {
		return err
	}
	if enq.Duplicate {
		fmt.Fprintf(stderr, "enqueue: duplicate: idempotency_key %q matches task %s (run_id %s) in queue %q; nothing enqueued\n",
			spec.IdempotencyKey, enq.TaskID, enq.RunID, enq.Queue)
	}
	if o.wait == "" {
		_, err := fmt.Fprintln(stdout, enq.TaskID)
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, o.waitTimeout)
	defer cancel()
	wait := c.Wait
	if o.wait == "final" {
		wait = c.WaitFinal
	}
	rec, err := wait(wctx, enq.Queue, enq.TaskID)
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return fmt.Errorf("no final state within -wait-timeout %s: %w", o.waitTimeout, err)
	}
	if err != nil {
		return err
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	_, err = stdout.Write(append(b, '\n'))
	return err
}

// readSpec reads the spec file at path, or stdin for "-", refusing more than
// maxPayload plus readSlack bytes.
func readSpec(path string, stdin io.Reader, maxPayload int) ([]byte, error) {
	r := stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	limit := int64(maxPayload) + readSlack
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("reading the spec: %w", err)
	}
	if int64(len(data)) > limit {
		return nil, &tasks.FieldError{
			Field: "spec",
			Msg:   fmt.Sprintf("more than %d bytes of JSON, so its payload would be above the cap of %d bytes", limit, maxPayload),
			Hint:  "inline files and stdin are for small inputs",
		}
	}
	return data, nil
}

// waitMode is the -wait flag: "" (do not wait), "true" (until parked or
// final) or "final" (through the approval).
type waitMode string

func (w *waitMode) String() string   { return string(*w) }
func (w *waitMode) IsBoolFlag() bool { return true }

func (w *waitMode) Set(v string) error {
	switch v {
	case "true", "parked":
		*w = "true"
	case "false":
		*w = ""
	case "final":
		*w = "final"
	default:
		return fmt.Errorf("want -wait, -wait=final or -wait=false, got %q", v)
	}
	return nil
}

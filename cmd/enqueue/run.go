package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/actions"
	"github.com/airlock-run/airlock/internal/cli"
	"github.com/airlock-run/airlock/internal/redis/queuepolicy"
	"github.com/airlock-run/airlock/tasks"
)

// Exit codes of Run.
const (
	exitOK       = cli.ExitOK    // enqueued, or finished with -wait whatever the verdict
	exitError    = cli.ExitError // Redis, a timeout, anything else
	exitRejected = cli.ExitUsage // bad flags, the spec was rejected, or a quota refused it
	exitNotYet   = 3             // -result: the run's output is not published; -cancel: the run was over already
)

// readSlack is how much larger than the payload cap the spec file may be:
// its JSON is re-encoded without whitespace before the cap applies.
const readSlack = 1 << 20

// options are the command's flags and argument.
type options struct {
	redis       *cli.Redis // -redis, -prefix
	wait        waitMode
	waitTimeout time.Duration
	retention   time.Duration
	queue       string
	principal   string
	waitID      string
	resultID    string
	cancelID    string
	json        bool
	specPath    string
	listActions bool
	action      string // -action: a call of this action, without a spec file
	params      string
	store       string // -store: where -result reads, overriding the record
}

const usageText = `usage: enqueue [flags] SPEC.json|-     enqueue a spec (- reads it from stdin)
       enqueue [flags] -action NAME [-params JSON]  enqueue a call of an operator's action
       enqueue [flags] -list-actions     list the actions the workers of -queue publish
       enqueue [flags] -wait-id TASK_ID  wait for (or read) a task already enqueued
       enqueue [flags] -result TASK_ID   print a promoted run's result and manifest
       enqueue [flags] -cancel TASK_ID   cancel a run, and print its record

Without -wait it prints the task id (with -json: {"task_id", "queue",
"run_id", "duplicate"}). With -wait it prints the run record as one JSON
object once the run is parked or done; -wait=final waits through the
approval. Errors go to stderr, or with -json to stdout as {"error", "field",
"code"}.

With -cancel it prints the canceled run's record as one JSON object
(state canceled; state active when its worker has not stopped it within
5s: the cancel goes on).

exit status: 0 enqueued (or, with -wait, done whatever its verdict;
with -cancel, canceled), 1 error (Redis, -wait-timeout, no such task...),
2 bad flags or a rejected spec, 3 (-result) the run's output is not
published (parked, rejected, failed...) or (-cancel) the run was over
before the cancel (completed, failed, parked...)

flags:
`

// Run runs the command with args (without the program name) and returns its
// exit code.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stdout, stderr)
	if err != nil {
		return cli.FlagsExit(stdout, stderr, "enqueue", o.json, err) // exitRejected is cli.ExitUsage
	}
	if err := run(ctx, o, stdin, stdout, stderr); err != nil {
		if errors.Is(err, airlock.ErrNotPromoted) || errors.Is(err, airlock.ErrFinal) {
			cli.PrintError(stdout, stderr, "enqueue", o.json, err, "", exitNotYet)
			return exitNotYet
		}
		var qe *airlock.QuotaError
		if errors.As(err, &qe) {
			// Refused by the principal's quota: nothing enqueued.
			cli.PrintError(stdout, stderr, "enqueue", o.json, err, qe.Quota, exitRejected)
			return exitRejected
		}
		var fe *tasks.FieldError
		if tasks.IsInvalid(err) && errors.As(err, &fe) {
			cli.PrintError(stdout, stderr, "enqueue", o.json, fmt.Errorf("spec rejected: %s", fe.Error()), fe.Field, exitRejected)
			return exitRejected
		}
		cli.PrintError(stdout, stderr, "enqueue", o.json, o.redis.Explain(err), "", exitError)
		return exitError
	}
	return exitOK
}

func parseFlags(args []string, stdout, stderr io.Writer) (options, error) {
	var o options
	fs := cli.NewFlagSet("enqueue", usageText)
	o.redis = cli.RedisFlags(fs)
	fs.Var(&o.wait, "wait", "wait and print the run record as one JSON object: -wait returns once the run is parked or done, -wait=final waits through the approval")
	fs.DurationVar(&o.waitTimeout, "wait-timeout", 5*time.Minute, "with -wait, give up after this long")
	fs.DurationVar(&o.retention, "retention", airlock.DefaultRetention, "how long the run record is kept after the task ends")
	fs.StringVar(&o.queue, "queue", "", "queue to enqueue in, overriding the spec's queue (with -wait-id: the task's queue, default \"default\"; with -result and -cancel: where to look, default every queue)")
	fs.StringVar(&o.principal, "principal", "", "who asks: stamped as the spec's principal (run record, events, approvals; policy rules on principal match it); a spec naming another is refused. Default: none (the spec's own, if any, is kept)")
	fs.StringVar(&o.waitID, "wait-id", "", "wait for the task with this id, already enqueued, and print its record (implies -wait)")
	fs.StringVar(&o.cancelID, "cancel", "", "cancel the run of this task (in -queue; default: the one queue that holds it) on behalf of -principal, and print its record as JSON")
	fs.StringVar(&o.resultID, "result", "", "print the published result and manifest of this task as JSON ({\"where\", \"manifest\", \"result\"})")
	fs.BoolVar(&o.json, "json", false, "print JSON: the enqueued task, and errors as {\"error\", \"field\", \"code\"}")
	fs.BoolVar(&o.listActions, "list-actions", false, "list the actions the workers of -queue (default \"default\") publish: name, params schema, description (with -json: the catalog as JSON)")
	fs.StringVar(&o.action, "action", "", "enqueue a call of this operator-defined action (worker -actions) instead of a spec file")
	fs.StringVar(&o.params, "params", "", "with -action: its params, a JSON object")
	fs.StringVar(&o.store, "store", "", "with -result: read the output in this store, the workers' -store as seen from here (a directory, or s3://bucket/prefix); default: where the run's record says, in the store its queue's workers announce")
	if err := cli.Parse(fs, args, stdout, stderr); err != nil {
		return o, err
	}
	switch {
	case o.store != "" && o.resultID == "":
		return o, errors.New("-store: only with -result (see -h)")
	case o.cancelID != "" && (fs.NArg() != 0 || o.waitID != "" || o.resultID != "" || o.action != "" || o.listActions || o.wait != ""):
		return o, errors.New("-cancel takes no spec, -wait, -wait-id, -result, -action or -list-actions (see -h)")
	case o.cancelID != "" && o.principal != "" && !tasks.ValidPrincipal(o.principal):
		return o, fmt.Errorf("-principal %q: want 1-64 of [A-Za-z0-9._@+-], starting with a letter or digit", o.principal)
	case o.cancelID != "":
		return o, nil // in -queue, or looked for in every queue
	case o.listActions && (fs.NArg() != 0 || o.waitID != "" || o.resultID != "" || o.action != ""):
		return o, errors.New("-list-actions takes no spec, -wait-id, -result or -action (see -h)")
	case o.listActions:
		return o, nil
	case o.params != "" && o.action == "":
		return o, errors.New("-params: only with -action (see -h)")
	case o.action != "" && (fs.NArg() != 0 || o.waitID != "" || o.resultID != ""):
		return o, errors.New("-action takes no spec file, -wait-id or -result (see -h)")
	case o.action != "":
		if !tasks.ValidActionName(o.action) {
			return o, fmt.Errorf("-action %q: want 1-64 of [A-Za-z0-9._-], starting with a letter or digit", o.action)
		}
		return o, nil
	case o.resultID != "" && (fs.NArg() != 0 || o.waitID != ""):
		return o, errors.New("-result takes no spec and no -wait-id (see -h)")
	case o.resultID != "":
		return o, nil // in -queue, or looked for in every queue
	case o.waitID != "" && fs.NArg() != 0:
		return o, errors.New("-wait-id takes no spec (see -h)")
	case o.waitID == "" && fs.NArg() != 1:
		return o, errors.New("want one argument, the spec file or - for stdin (see -h)")
	case o.waitTimeout <= 0:
		return o, errors.New("-wait-timeout: must be positive")
	case o.retention <= 0:
		return o, errors.New("-retention: must be positive (the run record must be kept to be read)")
	case o.principal != "" && !tasks.ValidPrincipal(o.principal):
		return o, fmt.Errorf("-principal %q: want 1-64 of [A-Za-z0-9._@+-], starting with a letter or digit", o.principal)
	}
	if o.waitID != "" {
		if o.wait == "" {
			o.wait = "true"
		}
		if o.queue == "" {
			o.queue = "default"
		}
		return o, nil
	}
	o.specPath = fs.Arg(0)
	return o, nil
}

func run(ctx context.Context, o options, stdin io.Reader, stdout, stderr io.Writer) error {
	rdb, _, err := o.redis.Open()
	if err != nil {
		return err
	}
	defer rdb.Close()
	c := airlock.NewClient(rdb, airlock.ClientOptions{Retention: o.retention, Prefix: o.redis.Prefix, Principal: o.principal, Store: o.store})
	if o.cancelID != "" {
		rec, err := c.Cancel(ctx, o.queue, o.cancelID)
		if err != nil {
			return err
		}
		return writeJSON(stdout, rec)
	}
	if o.resultID != "" {
		var p *airlock.Published
		if o.queue != "" {
			p, err = c.ResultIn(ctx, o.queue, o.resultID)
		} else {
			p, err = c.Result(ctx, o.resultID)
		}
		if err != nil {
			return err
		}
		return writeJSON(stdout, map[string]any{"where": p.Where, "manifest": p.Manifest, "result": p.Result})
	}
	if o.listActions {
		return printActions(ctx, c, o, stdout)
	}
	enq := airlock.Enqueued{TaskID: o.waitID, Queue: o.queue}
	if o.waitID == "" {
		var spec *tasks.Spec
		if o.action != "" {
			spec = &tasks.Spec{Version: tasks.Version, Action: o.action, Params: json.RawMessage(o.params)}
		} else {
			data, err := readSpec(o.specPath, stdin, tasks.DefaultMaxPayload)
			if err != nil {
				return err
			}
			if spec, err = tasks.Decode(data); err != nil {
				return err
			}
		}
		if o.queue != "" {
			spec.Queue = o.queue
		}
		if enq, err = c.Enqueue(ctx, spec); err != nil {
			return catalogHints.Rehint(err)
		}
		if enq.Duplicate && !o.json {
			fmt.Fprintf(stderr, "enqueue: duplicate: idempotency_key %q matches task %s (run_id %s) in queue %q; nothing enqueued\n",
				spec.IdempotencyKey, enq.TaskID, enq.RunID, enq.Queue)
		}
		if enq.NoWorker {
			fmt.Fprintf(stderr, "enqueue: warning: no worker serves queue %q (none announced itself in the last %s): task %s waits until one starts (worker -queues %s)\n",
				enq.Queue, queuepolicy.AnnounceTTL, enq.TaskID, enq.Queue)
		}
		if o.wait == "" {
			if o.json {
				return writeJSON(stdout, enqueuedJSON{TaskID: enq.TaskID, Queue: enq.Queue, RunID: enq.RunID, Duplicate: enq.Duplicate})
			}
			_, err := fmt.Fprintln(stdout, enq.TaskID)
			return err
		}
	}
	wctx, cancel := context.WithTimeout(ctx, o.waitTimeout)
	defer cancel()
	wait := c.Wait
	if o.wait == "final" {
		wait = c.WaitFinal
	}
	rec, err := wait(wctx, enq.Queue, enq.TaskID)
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return fmt.Errorf("task %s not done within -wait-timeout %s: %w", enq.TaskID, o.waitTimeout, err)
	}
	if err != nil {
		return err
	}
	return writeJSON(stdout, rec)
}

// enqueuedJSON is what -json prints for an enqueued spec.
type enqueuedJSON struct {
	TaskID    string `json:"task_id"`
	Queue     string `json:"queue"`
	RunID     string `json:"run_id"`
	Duplicate bool   `json:"duplicate"`
}

// writeJSON prints v as one line of JSON.
func writeJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
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

// catalogHints say, in the hints of a call the catalog refuses, how
// enqueue's user sees the catalog.
var catalogHints = airlock.CatalogHints{
	Actions: "enqueue -list-actions [-queue Q] lists them",
	Params:  "enqueue -list-actions [-queue Q] shows each action's params schema",
}

// printActions prints the catalog the workers of -queue published.
func printActions(ctx context.Context, c *airlock.Client, o options, stdout io.Writer) error {
	infos, err := c.Actions(ctx, o.queue)
	if err != nil {
		return err
	}
	if o.json {
		if infos == nil {
			infos = []actions.Info{}
		}
		return writeJSON(stdout, infos)
	}
	if len(infos) == 0 {
		q := o.queue
		if q == "" {
			q = "default"
		}
		_, err := fmt.Fprintf(stdout, "no action published for queue %q (workers publish their -actions catalog when they start)\n", q)
		return err
	}
	for _, i := range infos {
		if _, err := fmt.Fprintf(stdout, "%s  params %s\n    %s\n", i.Name, i.Params, i.Description); err != nil {
			return err
		}
	}
	return nil
}

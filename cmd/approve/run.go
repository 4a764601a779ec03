package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/promote"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// Exit codes of Run.
const (
	exitOK       = 0
	exitError    = 1 // usage, Redis, anything else
	exitNotFound = 3 // no such approval
	exitDecided  = 4 // decided already, or expired
)

// defaultRedisURL is the Redis used when neither -redis nor $REDIS_URL is.
const defaultRedisURL = "redis://127.0.0.1:6379/0"

// defaultQueue is where a promotion goes when the run summary names no
// queue (asynq's default queue).
const defaultQueue = "default"

// Run runs the command with args (without the program name) and returns its
// exit code.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return run(ctx, args, &env{now: time.Now, stdin: stdin, stdout: stdout, stderr: stderr})
}

// env is what a run depends on; tests fix the clock.
type env struct {
	now            func() time.Time
	stdin          io.Reader
	stdout, stderr io.Writer
}

// options are the flags; the global ones are accepted before and after
// the command.
type options struct {
	redisURL string
	prefix   string
	json     bool
	by       string
	// Flags of some commands.
	state   string
	limit   int
	comment string
	since   string
}

// command is a subcommand.
type command struct {
	args  string // usage of the positional arguments
	nargs int
	help  string
	flags func(fs *flag.FlagSet, o *options)
	run   func(c *cli, ctx context.Context, args []string) error
}

var commands map[string]*command

func init() {
	commands = map[string]*command{
		"list": {
			help: "list approvals, newest first",
			flags: func(fs *flag.FlagSet, o *options) {
				fs.StringVar(&o.state, "state", approve.StatePending, "pending, accepted, rejected, expired or all")
				fs.IntVar(&o.limit, "limit", 50, "list at most this many (0: all)")
			},
			run: (*cli).list,
		},
		"show": {args: "ID", nargs: 1, help: "show an approval: reasons, run, result, artifacts", run: (*cli).show},
		"accept": {
			args: "ID", nargs: 1, help: "accept a pending approval and queue its promotion",
			flags: func(fs *flag.FlagSet, o *options) { fs.StringVar(&o.comment, "comment", o.comment, "why (optional)") },
			run:   (*cli).accept,
		},
		"reject": {
			args: "ID", nargs: 1, help: "reject a pending approval, saying why (-comment)",
			flags: func(fs *flag.FlagSet, o *options) { fs.StringVar(&o.comment, "comment", o.comment, "why (required)") },
			run:   (*cli).reject,
		},
		"watch": {
			help: "print new pending approvals as they arrive, until interrupted",
			flags: func(fs *flag.FlagSet, o *options) {
				fs.StringVar(&o.since, "since", "", "start after this entry of the audit stream (default: now)")
			},
			run: (*cli).watch,
		},
		"history": {args: "ID", nargs: 1, help: "print the audit trail of an approval", run: (*cli).history},
	}
}

var commandOrder = []string{"list", "show", "accept", "reject", "watch", "history"}

// globalFlags defines the flags accepted before and after the command,
// with o's values as defaults.
func globalFlags(fs *flag.FlagSet, o *options) {
	fs.StringVar(&o.redisURL, "redis", o.redisURL, "Redis URL (env REDIS_URL)")
	fs.StringVar(&o.prefix, "prefix", o.prefix, "key prefix of the approval store")
	fs.BoolVar(&o.json, "json", o.json, "print JSON")
	fs.StringVar(&o.by, "by", o.by, "who decides (default: the login user)")
}

func usage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintln(w, "usage: approve [flags] COMMAND [flags] [ID]")
	fmt.Fprintln(w, "\ncommands:")
	for _, name := range commandOrder {
		c := commands[name]
		fmt.Fprintf(w, "  %-16s %s\n", strings.TrimSpace(name+" "+c.args), c.help)
	}
	fmt.Fprintln(w, "\nflags (before or after the command):")
	fs.SetOutput(w)
	fs.PrintDefaults()
	fmt.Fprintln(w, "\nexit status: 0 ok, 1 error, 3 not found, 4 decided already or expired")
}

func run(ctx context.Context, args []string, e *env) int {
	o := &options{redisURL: os.Getenv("REDIS_URL"), prefix: approve.DefaultPrefix}
	if o.redisURL == "" {
		o.redisURL = defaultRedisURL
	}
	fs := flag.NewFlagSet("approve", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	globalFlags(fs, o)
	fs.Usage = func() { usage(e.stderr, fs) }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitError
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(e.stderr, "approve: want a command: "+strings.Join(commandOrder, ", ")+" (see -h)")
		return exitError
	}
	name := fs.Arg(0)
	if name == "help" {
		usage(e.stdout, fs)
		return exitOK
	}
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(e.stderr, "approve: unknown command %q: want %s (see -h)\n", name, strings.Join(commandOrder, ", "))
		return exitError
	}
	sub := flag.NewFlagSet("approve "+name, flag.ContinueOnError)
	sub.SetOutput(e.stderr)
	globalFlags(sub, o)
	if cmd.flags != nil {
		cmd.flags(sub, o)
	}
	sub.Usage = func() {
		fmt.Fprintf(e.stderr, "usage: approve %s [flags]\n  %s\n\nflags:\n", strings.TrimSpace(name+" "+cmd.args), cmd.help)
		sub.PrintDefaults()
	}
	pos, err := parseInterspersed(sub, fs.Args()[1:])
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		return exitError // flag has printed the error and usage
	}
	if len(pos) != cmd.nargs {
		want := "no arguments"
		if cmd.nargs == 1 {
			want = "one argument, " + cmd.args
		}
		fmt.Fprintf(e.stderr, "approve %s: want %s, got %d (see approve %s -h)\n", name, want, len(pos), name)
		return exitError
	}
	if strings.ContainsAny(o.prefix, "{}") {
		fmt.Fprintf(e.stderr, "approve: -prefix %q: must not hold a brace\n", o.prefix)
		return exitError
	}
	c := &cli{env: e, o: o}
	defer c.close()
	if err := cmd.run(c, ctx, pos); err != nil {
		fmt.Fprintf(e.stderr, "approve %s: %v\n", name, err)
		return exitCode(err)
	}
	return exitOK
}

// parseInterspersed parses args with fs, allowing flags after positional
// arguments (approve accept ID -comment ok), and returns the positional
// arguments. Everything after "--" is positional.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		consumed := len(args) - len(rest)
		if consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

func exitCode(err error) int {
	switch {
	case errors.Is(err, approve.ErrNotFound):
		return exitNotFound
	case errors.Is(err, approve.ErrAlreadyDecided):
		return exitDecided
	}
	return exitError
}

// cli is one run of a command.
type cli struct {
	*env
	o     *options
	rdb   *redis.Client
	store *approve.Store
}

func (c *cli) connect() (*approve.Store, error) {
	if c.store != nil {
		return c.store, nil
	}
	opt, err := redis.ParseURL(c.o.redisURL)
	if err != nil {
		return nil, fmt.Errorf("-redis: %w", err)
	}
	c.rdb = redis.NewClient(opt)
	c.store = approve.NewStore(c.rdb, approve.Options{Prefix: c.o.prefix, Now: c.now})
	return c.store, nil
}

func (c *cli) close() {
	if c.rdb != nil {
		_ = c.rdb.Close()
	}
}

// decider is who decides: -by, else the login user.
func (c *cli) decider() (string, error) {
	if by := strings.TrimSpace(c.o.by); by != "" {
		return by, nil
	}
	if u := os.Getenv("SUDO_USER"); u != "" {
		return u, nil
	}
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username, nil
	}
	if u := os.Getenv("USER"); u != "" {
		return u, nil
	}
	return "", errors.New("cannot tell who you are: pass -by NAME")
}

func (c *cli) printJSON(v any) error {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// approvalJSON is an approval as -json prints it: the result as JSON when
// it is valid JSON (the Approval type would print it in base64).
type approvalJSON struct {
	*approve.Approval
	Result any `json:"result,omitempty"`
}

func asJSON(a *approve.Approval) approvalJSON {
	j := approvalJSON{Approval: a}
	if len(a.Result) > 0 {
		if json.Valid(a.Result) {
			j.Result = json.RawMessage(a.Result)
		} else {
			j.Result = string(a.Result)
		}
	}
	return j
}

func (c *cli) list(ctx context.Context, _ []string) error {
	st, err := c.connect()
	if err != nil {
		return err
	}
	as, err := st.List(ctx, c.o.state, c.o.limit)
	if err != nil {
		return err
	}
	if c.o.json {
		out := make([]approvalJSON, len(as))
		for i, a := range as {
			out[i] = asJSON(a)
		}
		return c.printJSON(out)
	}
	if _, err := io.WriteString(c.stdout, formatList(as, c.o.state, c.now())); err != nil {
		return err
	}
	if c.o.limit > 0 && len(as) == c.o.limit {
		fmt.Fprintf(c.stderr, "approve list: the %d newest; -limit 0 lists them all\n", len(as))
	}
	return nil
}

func (c *cli) show(ctx context.Context, args []string) error {
	st, err := c.connect()
	if err != nil {
		return err
	}
	a, err := st.Get(ctx, args[0])
	if err != nil {
		return err
	}
	if c.o.json {
		return c.printJSON(asJSON(a))
	}
	data := func(name string) ([]byte, error) { return st.Data(ctx, a.ID, name) }
	text, err := formatShow(a, data, c.now())
	if err != nil {
		return err
	}
	_, err = io.WriteString(c.stdout, text)
	return err
}

func (c *cli) accept(ctx context.Context, args []string) error {
	by, err := c.decider()
	if err != nil {
		return err
	}
	st, err := c.connect()
	if err != nil {
		return err
	}
	id := args[0]
	a, err := st.Accept(ctx, id, by, c.o.comment)
	if a == nil {
		var de *approve.DecidedError
		if errors.As(err, &de) && de.State == approve.StateAccepted {
			// Accepted by someone else (or by an earlier try of ours that
			// could not queue the promotion): queuing it is idempotent.
			if cur, gerr := st.Get(ctx, id); gerr == nil && cur.PromotedAt.IsZero() {
				if qerr := c.enqueue(ctx, cur); qerr == nil {
					return fmt.Errorf("%w; its promotion is queued", err)
				}
			}
		}
		return err
	}
	if err != nil { // accepted, but the indexes are stale
		fmt.Fprintf(c.stderr, "approve accept: warning: %v\n", err)
	}
	if err := c.enqueue(ctx, a); err != nil {
		return fmt.Errorf("accepted %s, but queuing its promotion failed: %w (run approve accept %s again to queue it; a worker re-queues it when it starts)", id, err, id)
	}
	if c.o.json {
		return c.printJSON(asJSON(a))
	}
	_, err = fmt.Fprintf(c.stdout, "accepted %s; promotion queued\n", id)
	return err
}

func (c *cli) enqueue(ctx context.Context, a *approve.Approval) error {
	q := a.Run.Queue
	if q == "" {
		q = defaultQueue
	}
	return promote.Enqueue(ctx, asynq.NewClientFromRedisClient(c.rdb), q, a.ID)
}

func (c *cli) reject(ctx context.Context, args []string) error {
	if strings.TrimSpace(c.o.comment) == "" {
		return errors.New("-comment TEXT is required: say why it is rejected")
	}
	by, err := c.decider()
	if err != nil {
		return err
	}
	st, err := c.connect()
	if err != nil {
		return err
	}
	a, err := st.Reject(ctx, args[0], by, c.o.comment)
	if a == nil {
		return err
	}
	if err != nil {
		fmt.Fprintf(c.stderr, "approve reject: warning: %v\n", err)
	}
	if c.o.json {
		return c.printJSON(asJSON(a))
	}
	_, err = fmt.Fprintf(c.stdout, "rejected %s\n", a.ID)
	return err
}

func (c *cli) watch(ctx context.Context, _ []string) error {
	st, err := c.connect()
	if err != nil {
		return err
	}
	enc := json.NewEncoder(c.stdout)
	enc.SetEscapeHTML(false)
	err = st.Watch(ctx, c.o.since, func(a *approve.Approval) error {
		if c.o.json {
			return enc.Encode(asJSON(a))
		}
		_, err := io.WriteString(c.stdout, formatWatch(a)+"\n")
		return err
	})
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return nil // interrupted: the normal end
	}
	return err
}

func (c *cli) history(ctx context.Context, args []string) error {
	st, err := c.connect()
	if err != nil {
		return err
	}
	h, err := st.History(ctx, args[0])
	if err != nil {
		return err
	}
	if c.o.json {
		return c.printJSON(h)
	}
	_, err = io.WriteString(c.stdout, formatHistory(h))
	return err
}

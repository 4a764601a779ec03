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

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/internal/cli"
)

// Exit codes of Run.
const (
	exitOK       = cli.ExitOK
	exitError    = cli.ExitError // Redis, anything else
	exitUsage    = cli.ExitUsage // bad flags, command or arguments
	exitNotFound = 3             // no such approval
	exitDecided  = 4             // decided already, or expired
)

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
	redis *cli.Redis // -redis, -prefix
	json  bool
	by    string
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
	run   func(c *session, ctx context.Context, args []string) error
}

var commands map[string]*command

func init() {
	commands = map[string]*command{
		"list": {
			help: "list approvals, newest first",
			flags: func(fs *flag.FlagSet, o *options) {
				fs.StringVar(&o.state, "state", string(approve.StatePending), "pending, accepted, rejected, expired or all")
				fs.IntVar(&o.limit, "limit", 50, "list at most this many (0: all)")
			},
			run: (*session).list,
		},
		"show": {args: "ID", nargs: 1, help: "show an approval: reasons, run, result, artifacts", run: (*session).show},
		"accept": {
			args: "ID", nargs: 1, help: "accept a pending approval and queue its promotion",
			flags: func(fs *flag.FlagSet, o *options) { fs.StringVar(&o.comment, "comment", o.comment, "why (optional)") },
			run:   (*session).accept,
		},
		"reject": {
			args: "ID", nargs: 1, help: "reject a pending approval, saying why (-comment)",
			flags: func(fs *flag.FlagSet, o *options) { fs.StringVar(&o.comment, "comment", o.comment, "why (required)") },
			run:   (*session).reject,
		},
		"watch": {
			help: "print new pending approvals as they arrive, until interrupted",
			flags: func(fs *flag.FlagSet, o *options) {
				fs.StringVar(&o.since, "since", "", "start after this entry of the audit stream (default: now)")
			},
			run: (*session).watch,
		},
		"history": {args: "ID", nargs: 1, help: "print the audit trail of an approval", run: (*session).history},
	}
}

var commandOrder = []string{"list", "show", "accept", "reject", "watch", "history"}

// globalFlags defines the flags accepted before and after the command,
// with o's values as defaults.
func globalFlags(fs *flag.FlagSet, o *options) {
	o.redis.Register(fs)
	fs.BoolVar(&o.json, "json", o.json, "print JSON")
	fs.StringVar(&o.by, "by", o.by, "who decides (default: the login user)")
}

func usage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintln(w, "usage: approve [flags] COMMAND [flags] [ID]")
	fmt.Fprintln(w, "\ncommands (and their own flags):")
	for _, name := range commandOrder {
		c := commands[name]
		fmt.Fprintf(w, "  %-16s %s\n", strings.TrimSpace(name+" "+c.args), c.help)
		if c.flags != nil {
			own := flag.NewFlagSet("approve "+name, flag.ContinueOnError)
			c.flags(own, &options{})
			var b strings.Builder
			own.SetOutput(&b)
			own.PrintDefaults()
			for _, l := range strings.Split(strings.TrimRight(b.String(), "\n"), "\n") {
				fmt.Fprintf(w, "    %s\n", l)
			}
		}
	}
	fmt.Fprintln(w, "\nflags (before or after the command):")
	fs.SetOutput(w)
	fs.PrintDefaults()
	fmt.Fprintln(w, "\nexit status: 0 ok, 1 error, 2 bad flags, command or arguments, 3 not found,\n4 decided already or expired. With -json, errors are printed on stdout as\n{\"error\", \"code\"}.")
}

func run(ctx context.Context, args []string, e *env) int {
	o := &options{redis: cli.NewRedis()}
	fs := flag.NewFlagSet("approve", flag.ContinueOnError)
	globalFlags(fs, o)
	fs.Usage = func() { usage(fs.Output(), fs) }
	if err := cli.Parse(fs, args, e.stdout, e.stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	fail := func(name string, code int, err error) int {
		// The store's errors start with its package name; the command
		// says which command it was, once.
		msg := strings.TrimPrefix(err.Error(), "approve: ")
		msg = strings.TrimPrefix(msg, name+": ")
		prog := strings.TrimSpace("approve " + name)
		if code == exitError {
			// A Redis connection error says which URL, and from where.
			msg = o.redis.Explain(&trimmed{msg, err}).Error()
		}
		cli.PrintError(e.stdout, e.stderr, prog, o.json, errors.New(msg), "", code)
		return code
	}
	if fs.NArg() == 0 {
		return fail("", exitUsage, errors.New("want a command: "+strings.Join(commandOrder, ", ")+" (see -h)"))
	}
	name := fs.Arg(0)
	if name == "help" {
		usage(e.stdout, fs)
		return exitOK
	}
	cmd, ok := commands[name]
	if !ok {
		return fail("", exitUsage, fmt.Errorf("unknown command %q: want %s (see -h)", name, strings.Join(commandOrder, ", ")))
	}
	sub := flag.NewFlagSet("approve "+name, flag.ContinueOnError)
	globalFlags(sub, o)
	if cmd.flags != nil {
		cmd.flags(sub, o)
	}
	sub.Usage = func() {
		fmt.Fprintf(sub.Output(), "usage: approve %s [flags]\n  %s\n\nflags:\n", strings.TrimSpace(name+" "+cmd.args), cmd.help)
		sub.PrintDefaults()
	}
	pos, err := parseInterspersed(sub, fs.Args()[1:], e)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		return exitUsage // cli.Parse has said why
	}
	if len(pos) != cmd.nargs {
		want := "no arguments"
		if cmd.nargs == 1 {
			want = "one argument, " + cmd.args
		}
		return fail(name, exitUsage, fmt.Errorf("want %s, got %d (see approve %s -h)", want, len(pos), name))
	}
	if err := o.redis.CheckPrefix(); err != nil {
		return fail(name, exitUsage, err)
	}
	c := &session{env: e, o: o}
	defer c.close()
	if err := cmd.run(c, ctx, pos); err != nil {
		return fail(name, exitCode(err), err)
	}
	return exitOK
}

// parseInterspersed parses args with fs, allowing flags after positional
// arguments (approve accept ID -comment ok), and returns the positional
// arguments. Everything after "--" is positional.
func parseInterspersed(fs *flag.FlagSet, args []string, e *env) ([]string, error) {
	var pos []string
	for {
		if err := cli.Parse(fs, args, e.stdout, e.stderr); err != nil {
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

// trimmed is err said as msg (without the store's package name), which
// cli.Redis.Explain can still look into.
type trimmed struct {
	msg string
	err error
}

// Error is the trimmed message.
func (t *trimmed) Error() string { return t.msg }

// Unwrap is the error as the store gave it.
func (t *trimmed) Unwrap() error { return t.err }

// usageError is a bad flag value found by a command: exit 2.
type usageError struct{ error }

func exitCode(err error) int {
	var u usageError
	switch {
	case errors.As(err, &u):
		return exitUsage
	case errors.Is(err, approve.ErrNotFound):
		return exitNotFound
	case errors.Is(err, approve.ErrAlreadyDecided):
		return exitDecided
	}
	return exitError
}

// session is one run of a command.
type session struct {
	*env
	o     *options
	rdb   redis.UniversalClient
	store *approve.Store
}

func (c *session) connect() (*approve.Store, error) {
	if c.store != nil {
		return c.store, nil
	}
	rdb, _, err := c.o.redis.Open()
	if err != nil {
		return nil, err
	}
	c.rdb = rdb
	c.store = approve.NewStore(c.rdb, approve.Options{Prefix: c.o.redis.Prefix, Now: c.now})
	return c.store, nil
}

func (c *session) close() {
	if c.rdb != nil {
		_ = c.rdb.Close()
	}
}

// decider is who decides: -by, else the login user.
func (c *session) decider() (string, error) {
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

func (c *session) printJSON(v any) error {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

func (c *session) list(ctx context.Context, _ []string) error {
	switch approve.State(c.o.state) {
	case approve.StatePending, approve.StateAccepted, approve.StateRejected, approve.StateExpired, approve.StateAll:
	default:
		return usageError{fmt.Errorf("-state: unknown state %q: want pending, accepted, rejected, expired or all", c.o.state)}
	}
	st, err := c.connect()
	if err != nil {
		return err
	}
	as, err := st.List(ctx, approve.State(c.o.state), c.o.limit)
	if err != nil {
		return err
	}
	if c.o.json {
		out := make([]approve.Summary, len(as))
		for i, a := range as {
			out[i] = a.Summary()
		}
		return c.printJSON(out)
	}
	if _, err := io.WriteString(c.stdout, formatList(as, approve.State(c.o.state), c.now())); err != nil {
		return err
	}
	if c.o.limit > 0 && len(as) == c.o.limit {
		fmt.Fprintf(c.stderr, "approve list: the %d newest; -limit 0 lists them all\n", len(as))
	}
	return nil
}

func (c *session) show(ctx context.Context, args []string) error {
	st, err := c.connect()
	if err != nil {
		return err
	}
	a, err := st.Get(ctx, args[0])
	if err != nil {
		return err
	}
	if c.o.json {
		return c.printJSON(a.View())
	}
	data := func(name string) ([]byte, error) { return st.Data(ctx, a.ID, name) }
	text, err := formatShow(a, data, c.now())
	if err != nil {
		return err
	}
	_, err = io.WriteString(c.stdout, text)
	return err
}

func (c *session) accept(ctx context.Context, args []string) error {
	by, err := c.decider()
	if err != nil {
		return err
	}
	st, err := c.connect()
	if err != nil {
		return err
	}
	a, warn, err := approve.Accept(ctx, st, asynq.NewClientFromRedisClient(c.rdb), args[0], by, c.o.comment)
	if warn != nil { // accepted, but the indexes are stale
		fmt.Fprintf(c.stderr, "approve accept: warning: %v\n", warn)
	}
	if err != nil {
		return err
	}
	if c.o.json {
		return c.printJSON(a.View())
	}
	_, err = fmt.Fprintf(c.stdout, "accepted %s; promotion queued\n", a.ID)
	return err
}

func (c *session) reject(ctx context.Context, args []string) error {
	if strings.TrimSpace(c.o.comment) == "" {
		return usageError{errors.New("-comment TEXT is required: say why it is rejected")}
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
		return c.printJSON(a.View())
	}
	_, err = fmt.Fprintf(c.stdout, "rejected %s\n", a.ID)
	return err
}

func (c *session) watch(ctx context.Context, _ []string) error {
	st, err := c.connect()
	if err != nil {
		return err
	}
	enc := json.NewEncoder(c.stdout)
	enc.SetEscapeHTML(false)
	err = st.Watch(ctx, c.o.since, func(a *approve.Approval) error {
		if c.o.json {
			return enc.Encode(a.View())
		}
		_, err := io.WriteString(c.stdout, formatWatch(a)+"\n")
		return err
	})
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return nil // interrupted: the normal end
	}
	return err
}

func (c *session) history(ctx context.Context, args []string) error {
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

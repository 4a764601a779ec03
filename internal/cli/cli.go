// Package cli holds what Airlock's commands share: flag parsing that
// prints a command's own usage on -h (exit 0), its version on -version
// (exit 0) and a bad flag once (exit 2), where the default Redis comes
// from (-redis, $REDIS_URL, the URL a dev-mode worker wrote, then
// 127.0.0.1:6379/0) and Redis errors that say so, and errors printed as
// text or as JSON.
package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/airlock-run/airlock"
)

// Exit codes every command shares. Commands add their own above 2.
const (
	ExitOK    = 0 // done
	ExitError = 1 // Redis, the run, anything else
	ExitUsage = 2 // bad flags or arguments, or (enqueue) a rejected spec
)

// ErrUsage is returned by Parse for a bad flag: the message is printed.
var ErrUsage = errors.New("usage")

// NewFlagSet is a command's flag set for Parse: its usage, printed on -h,
// is text followed by the flags and their defaults.
func NewFlagSet(name, text string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), text)
		fs.PrintDefaults()
	}
	return fs
}

// FlagsExit is the exit code of a command whose flags did not parse or
// check (err not nil): ExitOK after -h, else ExitUsage, err printed as by
// PrintError unless Parse has printed it.
func FlagsExit(stdout, stderr io.Writer, name string, asJSON bool, err error) int {
	switch {
	case errors.Is(err, flag.ErrHelp):
		return ExitOK
	case !errors.Is(err, ErrUsage):
		PrintError(stdout, stderr, name, asJSON, err, "", ExitUsage)
	}
	return ExitUsage
}

// Parse parses args with fs. On -h or -help it prints fs.Usage to stdout
// and returns flag.ErrHelp; on a bad flag it prints "<name>: <error> (see
// <name> -h)" once to stderr and returns ErrUsage. fs.Usage must write to
// fs.Output().
//
// Parse adds -version to fs unless it has one: with it, Parse prints
// airlock.Version on stdout and returns ErrVersion.
func Parse(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	if fs.Lookup("version") == nil {
		fs.Var(new(versionFlag), "version", "print the version ("+airlock.Version+") and exit")
	}
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		fs.Usage()
		return flag.ErrHelp
	case err != nil:
		fmt.Fprintf(stderr, "%s: %v (see %s -h)\n", fs.Name(), err, fs.Name())
		return ErrUsage
	}
	fs.SetOutput(stderr)
	if v, ok := fs.Lookup("version").Value.(*versionFlag); ok && bool(*v) {
		fmt.Fprintln(stdout, airlock.Version)
		return ErrVersion
	}
	return nil
}

// ErrVersion is returned by Parse once -version has printed the version.
// It matches flag.ErrHelp: a command exits 0 after it, as after -h.
var ErrVersion = fmt.Errorf("version printed: %w", flag.ErrHelp)

// versionFlag is the -version flag Parse adds.
type versionFlag bool

// String is "true" once -version is given.
func (v *versionFlag) String() string {
	if v == nil {
		return "false"
	}
	return strconv.FormatBool(bool(*v))
}

// Set takes -version's value (a bool).
func (v *versionFlag) Set(s string) error {
	b, err := strconv.ParseBool(s)
	*v = versionFlag(b)
	return err
}

// IsBoolFlag makes -version a flag without a value.
func (v *versionFlag) IsBoolFlag() bool { return true }

// DevURLFile is where a dev-mode worker writes the URL of its embedded
// Redis, for the commands run beside it: $XDG_RUNTIME_DIR/airlock/dev-redis-url,
// or <temp dir>/airlock-<uid>/dev-redis-url. The commands read it only
// when it and its directory are the user's own and writable by no one
// else.
func DevURLFile() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "airlock", "dev-redis-url")
	}
	return filepath.Join(os.TempDir(), "airlock-"+strconv.Itoa(os.Getuid()), "dev-redis-url")
}

// WriteDevURL writes url to DevURLFile and returns a func that removes it.
func WriteDevURL(url string) (func(), error) {
	p := DevURLFile()
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return nil, err
	}
	if err := private(filepath.Dir(p)); err != nil {
		return nil, fmt.Errorf("not writing the dev URL file: %w", err)
	}
	if err := os.WriteFile(p, []byte(url+"\n"), 0o600); err != nil {
		return nil, err
	}
	return func() {
		if b, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(b)) == url {
			_ = os.Remove(p)
		}
	}, nil
}

// ErrorJSON is how a command with -json prints an error on stdout.
type ErrorJSON struct {
	Error string `json:"error"`
	// Field is the spec's field an error names (a rejected spec), if any.
	Field string `json:"field,omitempty"`
	// Code is the exit code.
	Code int `json:"code"`
}

// PrintError prints err as "<name>: <err>" on stderr, or, with asJSON,
// as an ErrorJSON on stdout.
func PrintError(stdout, stderr io.Writer, name string, asJSON bool, err error, field string, code int) {
	if !asJSON {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return
	}
	enc := json.NewEncoder(stdout)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(ErrorJSON{Error: err.Error(), Field: field, Code: code})
}

//go:build linux

package bench

// The redis section's instruments: a MONITOR connection, read into
// segments between markers (monState), and INFO snapshots (redisSnap).

import (
	"bufio"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// opKey is one kind of line of a MONITOR segment.
type opKey struct {
	addr   string // the client's address; for a script's command, its caller's
	cmd    string // lower case; a container command with its subcommand: "client|setname"
	script string // a script call's script (sha1, "fcall:NAME"), or the script a command ran in
	inner  bool   // a command a script ran ("[0 lua]")
}

// opSegment is what MONITOR showed between two markers.
type opSegment struct {
	from, to float64 // the markers' MONITOR timestamps, seconds
	ops      map[opKey]int
}

func (s *opSegment) seconds() float64 { return s.to - s.from }

// monState turns MONITOR lines into segments. Lines of a script's commands
// ("[0 lua]") go to the script call that ran them: the call line before
// them (Redis 7.0 feeds a call to the monitors before running it), or,
// with luaFirst, after them (Redis 7.2 and later feed it once it ran).
type monState struct {
	marker   string // an ECHO of an argument with this prefix ends a segment
	luaFirst bool
	names    map[string]string // address → client name, from CLIENT SETNAME and HELLO … SETNAME
	bodies   map[string]string // sha1 → the script, from EVAL
	owner    opKey             // the last script call, while its commands may follow
	pending  []string          // luaFirst: commands of a script call not yet seen
	cur      *opSegment
}

func newMonState(marker string, luaFirst bool) *monState {
	return &monState{marker: marker, luaFirst: luaFirst, names: map[string]string{}, bodies: map[string]string{},
		cur: &opSegment{ops: map[opKey]int{}}}
}

// feed reads one MONITOR line (the "+" and CRLF may be left on). A marker
// line returns the segment it ends and the marker.
func (m *monState) feed(line string) (*opSegment, string) {
	ts, addr, args, ok := parseMonitorLine(line)
	if !ok || len(args) == 0 {
		return nil, ""
	}
	cmd := commandName(args)
	if addr == "lua" {
		switch {
		case m.luaFirst:
			m.pending = append(m.pending, cmd)
		case m.owner.script != "":
			k := m.owner
			k.cmd, k.inner = cmd, true
			m.cur.ops[k]++
		default:
			m.cur.ops[opKey{addr: addr, cmd: cmd, inner: true}]++
		}
		return nil, ""
	}
	m.owner = opKey{}
	if cmd == "echo" && len(args) == 2 && strings.HasPrefix(args[1], m.marker) {
		seg := m.cur
		seg.to = ts
		m.cur = &opSegment{from: ts, ops: map[opKey]int{}}
		return seg, args[1]
	}
	switch cmd {
	case "client|setname":
		if len(args) > 2 {
			m.names[addr] = args[2]
		}
	case "hello":
		for i := 2; i+1 < len(args); i++ {
			if strings.EqualFold(args[i], "setname") {
				m.names[addr] = args[i+1]
			}
		}
	}
	k := opKey{addr: addr, cmd: cmd}
	switch cmd {
	case "eval", "eval_ro":
		if len(args) > 1 {
			sum := sha1.Sum([]byte(args[1]))
			k.script = hex.EncodeToString(sum[:])
			m.bodies[k.script] = args[1]
		}
	case "evalsha", "evalsha_ro":
		if len(args) > 1 {
			k.script = strings.ToLower(args[1])
		}
	case "fcall", "fcall_ro":
		if len(args) > 1 {
			k.script = "fcall:" + args[1]
		}
	}
	if m.luaFirst {
		for _, c := range m.pending {
			ik := opKey{addr: "lua", cmd: c, inner: true}
			if k.script != "" {
				ik = k
				ik.cmd, ik.inner = c, true
			}
			m.cur.ops[ik]++
		}
		m.pending = nil
	} else if k.script != "" {
		m.owner = k
	}
	m.cur.ops[k]++
	return nil, ""
}

// containerCommands are the commands INFO commandstats counts by
// subcommand ("client|setname").
var containerCommands = map[string]bool{"client": true, "config": true, "script": true, "object": true, "xinfo": true,
	"xgroup": true, "memory": true, "function": true, "pubsub": true, "cluster": true, "command": true, "acl": true,
	"latency": true, "slowlog": true, "module": true}

// commandName is the command of args as INFO commandstats names it.
func commandName(args []string) string {
	c := strings.ToLower(args[0])
	if containerCommands[c] && len(args) > 1 {
		c += "|" + strings.ToLower(args[1])
	}
	return c
}

// parseMonitorLine splits `1700000000.123456 [0 127.0.0.1:5000] "cmd" "arg"`
// into its timestamp, the client's address ("lua" for a script's
// command) and the unquoted arguments.
func parseMonitorLine(line string) (ts float64, addr string, args []string, ok bool) {
	line = strings.TrimRight(strings.TrimPrefix(line, "+"), "\r\n")
	stamp, rest, found := strings.Cut(line, " ")
	if !found || !strings.HasPrefix(rest, "[") {
		return 0, "", nil, false
	}
	ts, err := strconv.ParseFloat(stamp, 64)
	if err != nil {
		return 0, "", nil, false
	}
	end := strings.IndexByte(rest, ']')
	if end < 0 {
		return 0, "", nil, false
	}
	_, addr, _ = strings.Cut(rest[1:end], " ")
	s := rest[end+1:]
	for {
		s = strings.TrimLeft(s, " ")
		if s == "" {
			return ts, addr, args, true
		}
		if s[0] != '"' {
			return 0, "", nil, false
		}
		var b strings.Builder
		i := 1
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] != '\\' || i+1 >= len(s) {
				b.WriteByte(s[i])
				continue
			}
			i++
			switch s[i] {
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'a':
				b.WriteByte('\a')
			case 'b':
				b.WriteByte('\b')
			case 'x':
				if v, err := strconv.ParseUint(s[i+1:min(i+3, len(s))], 16, 8); err == nil && i+2 < len(s) {
					b.WriteByte(byte(v))
					i += 2
				} else {
					b.WriteByte('x')
				}
			default: // \\ and \"
				b.WriteByte(s[i])
			}
		}
		if i >= len(s) {
			return 0, "", nil, false
		}
		args = append(args, b.String())
		s = s[i+1:]
	}
}

// monitor is a MONITOR connection read into a monState.
type monitor struct {
	conn  net.Conn
	meter *meter
	seq   int
	mu    sync.Mutex
	st    *monState
	marks chan markedSegment
	done  chan struct{}
	err   error // of the reader, once done is closed
}

type markedSegment struct {
	seg  *opSegment
	mark string
}

// openMonitor starts MONITOR on addr, read into st; markers go through m.
func openMonitor(ctx context.Context, addr string, m *meter, st *monState) (*monitor, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	r := bufio.NewReaderSize(conn, 1<<20)
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		conn.Close()
		return nil, err
	}
	if l, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(l, "+OK") {
		conn.Close()
		return nil, fmt.Errorf("MONITOR: %q %v", l, err)
	}
	_ = conn.SetDeadline(time.Time{})
	mon := &monitor{conn: conn, meter: m, st: st, marks: make(chan markedSegment, 16), done: make(chan struct{})}
	go func() {
		defer close(mon.done)
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				mon.err = err
				return
			}
			mon.mu.Lock()
			seg, mark := mon.st.feed(l)
			mon.mu.Unlock()
			if seg != nil {
				select {
				case mon.marks <- markedSegment{seg, mark}:
				default: // nobody waits for it
				}
			}
		}
	}()
	return mon, nil
}

// mark ends the current segment with a marker and returns it, once the
// monitor has read that far.
func (mon *monitor) mark(ctx context.Context) (*opSegment, error) {
	mon.seq++
	mk := mon.meter.marker + strconv.Itoa(mon.seq)
	if err := mon.meter.rdb.Echo(ctx, mk).Err(); err != nil {
		return nil, err
	}
	deadline := time.After(30 * time.Second)
	for {
		select {
		case ms := <-mon.marks:
			if ms.mark == mk {
				return ms.seg, nil
			}
		case <-mon.done:
			return nil, fmt.Errorf("MONITOR connection: %v", mon.err)
		case <-deadline:
			return nil, errors.New("MONITOR: marker not seen after 30s")
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// close ends the MONITOR connection.
func (mon *monitor) close() {
	mon.conn.Close()
	<-mon.done
}

// state runs f on the monitor's state.
func (mon *monitor) state(f func(*monState)) {
	mon.mu.Lock()
	defer mon.mu.Unlock()
	f(mon.st)
}

// meter is the redis section's own connection (client name "meter"): INFO
// snapshots, markers, waiting. It counts its own commands, which every
// figure leaves out.
type meter struct {
	rdb    *redis.Client
	marker string
	own    map[string]int64 // commands since the last snapshot, by commandstats name
}

func (m *meter) count(cmd string) { m.own[cmd]++ }

// cmdStat is one command's line of INFO commandstats.
type cmdStat struct{ calls, usec int64 }

// redisSnap is INFO commandstats and cpu at one moment.
type redisSnap struct {
	at   time.Time
	cmds map[string]cmdStat
	cpu  float64 // used_cpu_user + used_cpu_sys, seconds
	own  map[string]int64
}

// snapshot reads INFO commandstats and cpu. The INFO itself counts in the
// next snapshot: its figures are taken before it is.
func (m *meter) snapshot(ctx context.Context) (redisSnap, error) {
	s, err := m.rdb.Info(ctx, "commandstats", "cpu").Result()
	if err != nil {
		return redisSnap{}, err
	}
	snap := parseInfo(s)
	snap.at, snap.own = time.Now(), m.own
	m.own = map[string]int64{"info": 1}
	return snap, nil
}

func parseInfo(s string) redisSnap {
	snap := redisSnap{cmds: map[string]cmdStat{}}
	for _, l := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(l), ":")
		if !ok {
			continue
		}
		if name, ok := strings.CutPrefix(k, "cmdstat_"); ok {
			var c cmdStat
			for _, kv := range strings.Split(v, ",") {
				f, x, _ := strings.Cut(kv, "=")
				n, _ := strconv.ParseInt(x, 10, 64)
				switch f {
				case "calls":
					c.calls = n
				case "usec":
					c.usec = n
				}
			}
			snap.cmds[name] = c
			continue
		}
		if k == "used_cpu_user" || k == "used_cpu_sys" {
			x, _ := strconv.ParseFloat(v, 64)
			snap.cpu += x
		}
	}
	return snap
}

// opsDelta is what Redis did between two snapshots, the meter's own
// commands left out (their µs in proportion to their share of calls).
type opsDelta struct {
	secs  float64
	calls map[string]float64
	usec  map[string]float64
	cpuUS float64 // used_cpu, less the meter's command µs
}

func diffSnaps(a, b redisSnap) opsDelta {
	d := opsDelta{secs: b.at.Sub(a.at).Seconds(), calls: map[string]float64{}, usec: map[string]float64{},
		cpuUS: (b.cpu - a.cpu) * 1e6}
	for name, cb := range b.cmds {
		ca := a.cmds[name]
		calls, usec := float64(cb.calls-ca.calls), float64(cb.usec-ca.usec)
		if calls <= 0 {
			continue
		}
		if own := float64(b.own[name]); own > 0 {
			share := min(own/calls, 1)
			d.cpuUS -= usec * share
			calls, usec = calls-own, usec*(1-share)
		}
		if calls > 0 {
			d.calls[name], d.usec[name] = calls, usec
		}
	}
	return d
}

// scriptLit is a Lua script's text as a Go source spells it, and a name
// for it.
type scriptLit struct{ name, text string }

var newScriptRe = regexp.MustCompile("(\\w+)\\s*=\\s*redis\\.NewScript\\(")

// scriptLiterals finds each NAME = redis.NewScript(…) of a Go source whose
// first raw string literal starts on its line, and names that text
// prefix.NAME, less a Cmd or Script suffix. For a script built as a
// concatenation (luaLib + literal), the text is that literal alone.
func scriptLiterals(src, prefix string) []scriptLit {
	var out []scriptLit
	for _, m := range newScriptRe.FindAllStringSubmatchIndex(src, -1) {
		rest := src[m[1]:]
		i := strings.IndexByte(rest, '`')
		if i < 0 || strings.Contains(rest[:i], "\n") {
			continue
		}
		j := strings.IndexByte(rest[i+1:], '`')
		if j < 0 {
			continue
		}
		name := src[m[2]:m[3]]
		for _, suf := range []string{"Cmd", "Script"} {
			if s, ok := strings.CutSuffix(name, suf); ok && s != "" {
				name = s
			}
		}
		if text := rest[i+1 : i+1+j]; len(strings.TrimSpace(text)) >= 20 {
			out = append(out, scriptLit{name: prefix + name, text: text})
		}
	}
	return out
}

// loadScriptLiterals reads the scripts of this module's sources and of
// asynq's (internal/rdb), when the sources are there.
func loadScriptLiterals(ctx context.Context) []scriptLit {
	mod, ok := moduleDir()
	if !ok {
		return nil
	}
	var out []scriptLit
	read := func(path, prefix string) {
		b, err := os.ReadFile(path)
		if err == nil && strings.Contains(string(b), "redis.NewScript(") {
			out = append(out, scriptLiterals(string(b), prefix)...)
		}
	}
	_ = filepath.WalkDir(mod, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() {
			if n := d.Name(); path != mod && (strings.HasPrefix(n, ".") || n == "testdata" || n == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			read(path, filepath.Base(filepath.Dir(path))+".")
		}
		return nil
	})
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/hibiken/asynq")
	cmd.Dir = mod
	if dir, err := cmd.Output(); err == nil {
		files, _ := filepath.Glob(filepath.Join(strings.TrimSpace(string(dir)), "internal", "rdb", "*.go"))
		for _, f := range files {
			if !strings.HasSuffix(f, "_test.go") {
				read(f, "asynq.")
			}
		}
	}
	return out
}

// scriptName names a script by the longest known literal its text holds;
// "" when none.
func scriptName(body string, lits []scriptLit) string {
	best := scriptLit{}
	for _, l := range lits {
		if len(l.text) > len(best.text) && strings.Contains(body, l.text) {
			best = l
		}
	}
	return best.name
}

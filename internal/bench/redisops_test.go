//go:build linux

package bench

import (
	"crypto/sha1"
	"encoding/hex"
	"slices"
	"testing"
)

func TestParseMonitorLine(t *testing.T) {
	ts, addr, args, ok := parseMonitorLine("+1700000000.250000 [0 127.0.0.1:5000] \"hset\" \"k\\\"q\\\\\" \"a\\nb\\x00c\" \"\"\r\n")
	if !ok || ts != 1700000000.25 || addr != "127.0.0.1:5000" {
		t.Fatalf("got %v %q %v", ts, addr, ok)
	}
	if want := []string{"hset", `k"q\`, "a\nb\x00c", ""}; !slices.Equal(args, want) {
		t.Errorf("args %q, want %q", args, want)
	}
	if _, addr, _, ok := parseMonitorLine(`1700000000.3 [3 lua] "get" "k"`); !ok || addr != "lua" {
		t.Errorf("lua line: %q %v", addr, ok)
	}
	for _, bad := range []string{"+OK", `1700000000.3 [0 x] "unterminated`, `1700000000.3 [0 x] bare`} {
		if _, _, _, ok := parseMonitorLine(bad); ok {
			t.Errorf("%q parsed", bad)
		}
	}
}

// monLines feeds lines and returns the segment the final marker ends.
func monLines(t *testing.T, luaFirst bool, lines ...string) (*monState, *opSegment) {
	t.Helper()
	m := newMonState("mark-", luaFirst)
	var last *opSegment
	for _, l := range lines {
		if seg, mk := m.feed(l); seg != nil {
			if mk == "" {
				t.Fatal("a segment without its marker")
			}
			last = seg
		}
	}
	return m, last
}

func TestMonStateAttributesScriptCommands(t *testing.T) {
	body := "return redis.call('get', KEYS[1])"
	sum := sha1.Sum([]byte(body))
	sha := hex.EncodeToString(sum[:])
	eval := `1.0 [0 10.0.0.1:1] "eval" "return redis.call('get', KEYS[1])" "1" "k"`
	evalsha := `1.1 [0 10.0.0.2:2] "evalsha" "` + sha + `" "1" "k"`
	inner := `1.1 [0 lua] "get" "k"`
	for _, tc := range []struct {
		name     string
		luaFirst bool
		lines    []string
	}{
		{"call first (7.0)", false, []string{eval, inner, evalsha, inner, inner}},
		{"commands first (7.2)", true, []string{inner, eval, inner, inner, evalsha}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lines := append([]string{
				`0.5 [0 10.0.0.1:1] "client" "setname" "client"`,
				`0.6 [0 10.0.0.2:2] "hello" "3" "auth" "(redacted)" "(redacted)" "setname" "worker"`,
				`0.9 [0 10.0.0.9:9] "echo" "mark-1"`,
			}, tc.lines...)
			lines = append(lines, `2.0 [0 10.0.0.2:2] "hset" "x" "f" "v"`, `2.5 [0 10.0.0.9:9] "echo" "mark-2"`)
			m, seg := monLines(t, tc.luaFirst, lines...)
			if seg == nil || seg.seconds() < 1.59 || seg.seconds() > 1.61 {
				t.Fatalf("segment %+v", seg)
			}
			want := map[opKey]int{
				{addr: "10.0.0.1:1", cmd: "eval", script: sha}:             1,
				{addr: "10.0.0.1:1", cmd: "get", script: sha, inner: true}: 1,
				{addr: "10.0.0.2:2", cmd: "evalsha", script: sha}:          1,
				{addr: "10.0.0.2:2", cmd: "get", script: sha, inner: true}: 2,
				{addr: "10.0.0.2:2", cmd: "hset"}:                          1,
			}
			if len(seg.ops) != len(want) {
				t.Errorf("ops %v, want %v", seg.ops, want)
			}
			for k, n := range want {
				if seg.ops[k] != n {
					t.Errorf("%+v: %d, want %d", k, seg.ops[k], n)
				}
			}
			if m.names["10.0.0.1:1"] != "client" || m.names["10.0.0.2:2"] != "worker" {
				t.Errorf("names %v", m.names)
			}
			if m.bodies[sha] != body {
				t.Errorf("bodies %v", m.bodies)
			}
		})
	}
}

func TestDiffSnapsLeavesOutTheMeter(t *testing.T) {
	a := parseInfo("# Commandstats\r\ncmdstat_info:calls=4,usec=40,usec_per_call=10.00\r\ncmdstat_get:calls=10,usec=10\r\n# CPU\r\nused_cpu_sys:1.000000\r\nused_cpu_user:2.000000\r\n")
	b := parseInfo("cmdstat_info:calls=5,usec=50\r\ncmdstat_get:calls=20,usec=30\r\ncmdstat_client|list:calls=1,usec=5\r\nused_cpu_sys:1.000100\r\nused_cpu_user:2.000100\r\n")
	b.own = map[string]int64{"info": 1, "get": 5}
	d := diffSnaps(a, b)
	if d.calls["info"] != 0 || d.calls["get"] != 5 || d.usec["get"] != 10 || d.calls["client|list"] != 1 {
		t.Errorf("calls %v usec %v", d.calls, d.usec)
	}
	// 200 µs of CPU less the meter's INFO (10) and half the GETs' 20.
	if d.cpuUS < 179.9 || d.cpuUS > 180.1 {
		t.Errorf("cpu %v µs, want 180", d.cpuUS)
	}
}

func TestScriptLiterals(t *testing.T) {
	src := "var (\n\tdequeueCmd = redis.NewScript(`\nlocal x = redis.call('LMOVE', KEYS[1])\n`)\n" +
		"\tadmitScript = redis.NewScript(luaLib(3) + `\nlocal y = redis.call('ZADD', KEYS[2])\n`)\n" +
		"\tbuilt = redis.NewScript(\n\t\tfmt.Sprintf(`local z = 1 -- far too far`))\n)\n"
	lits := scriptLiterals(src, "p.")
	var names []string
	for _, l := range lits {
		names = append(names, l.name)
	}
	if !slices.Equal(names, []string{"p.dequeue", "p.admit"}) {
		t.Fatalf("names %v", names)
	}
	if got := scriptName("-- lib\n"+lits[1].text, lits); got != "p.admit" {
		t.Errorf("scriptName: %q", got)
	}
	if got := scriptName("return 1", lits); got != "" {
		t.Errorf("scriptName of an unknown script: %q", got)
	}
}

func TestBreakdownLines(t *testing.T) {
	cmds := []RedisCmd{
		{Client: "worker", Command: "evalsha", Script: "asynq.dequeue", PerRun: 2, InnerPerRun: 8, IdlePerS: 0.5},
		{Client: "worker", Command: "hset", PerRun: 1},
		{Client: "worker", Command: "evalsha", Script: "asynq.markAsComplete", PerRun: 1, InnerPerRun: 7},
		{Client: "worker", Command: "ping", PerRun: 0.01, IdlePerS: 0.05},
	}
	got := breakdownLines(cmds, false)
	want := []string{"worker: evalsha 3 (asynq.dequeue 2 +8, asynq.markAsComplete 1 +7), hset 1"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := breakdownLines(cmds, true); !slices.Equal(got, []string{"worker evalsha 0.5 (asynq.dequeue 0.5)"}) {
		t.Errorf("idle: %q", got)
	}
}

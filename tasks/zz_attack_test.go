package tasks

import (
	"fmt"
	"testing"

	"github.com/airlock-run/airlock/limits"
)

func TestZZAttackModes(t *testing.T) {
	for _, m := range []string{`"04755"`, `"4755"`, `"0o777"`, `"777"`, `"0777"`, `"-1"`, `"00777"`, `"99999999999999999999"`, `"1777"`, `"0x1ff"`, `" 777"`, `"777\n"`, `"０７７７"`, `511`, `null`, `"+777"`, `"0_777"`} {
		for _, p := range []string{"run.sh", "d/run.sh", "d/", "./x", "../x", "/etc/x", "."} {
			js := fmt.Sprintf(`{"version":1,"files":{%q:{"text":"x","mode":%s}},"steps":[{"name":"a","run":["true"]}]}`, p, m)
			s, err := Decode([]byte(js))
			if err == nil {
				err = s.Prepare(limits.DefaultPolicy())
			}
			if err == nil {
				t.Logf("ACCEPT mode=%s path=%s -> %v", m, p, s.FileModes)
			} else if p == "run.sh" {
				t.Logf("reject mode=%s: %v", m, err)
			}
		}
	}
	// escaped key
	js := `{"version":1,"files":{"a":{"text":"x","\u006dode":"4755"}},"steps":[{"name":"a","run":["true"]}]}`
	_, err := Decode([]byte(js))
	t.Logf("escaped: %v", err)
	js = `{"version":1,"files":{"a":{"text":"x","mode":"0755","mode":"4755"}},"steps":[{"name":"a","run":["true"]}]}`
	_, err = Decode([]byte(js))
	t.Logf("dup: %v", err)
	js = `{"version":1,"files":{"a":{"text":"x","Mode":"4755"}},"steps":[{"name":"a","run":["true"]}]}`
	_, err = Decode([]byte(js))
	t.Logf("case: %v", err)
	// Go-set mode
	s := &Spec{Version: 1, Files: map[string]File{"a": "x"}, FileModes: map[string]FileMode{"a": 0o4755}}
	t.Logf("go-set: %v", s.prepareFiles())
	for _, l := range []string{`{"profile":"browser"}`, `{"profile":"Browser"}`, `{"profile":"browser","memory":"8GiB"}`, `{"profile":""}`, `{"profile":"browser","processes":0}`} {
		js := `{"version":1,"limits":` + l + `,"steps":[{"name":"a","run":["true"]}]}`
		s, err := Decode([]byte(js))
		if err == nil {
			err = s.Prepare(limits.DefaultPolicy())
		}
		if err == nil {
			t.Logf("limits %s -> %+v", l, s.Limits)
		} else {
			t.Logf("limits %s -> %v", l, err)
		}
		max, _ := limits.Parse("-max-limits", "memory=512MiB")
		pol := limits.DefaultPolicy()
		pol.Max = max.Merge(pol.Max)
		pol.Default = pol.Default.Clamp(pol.Max)
		s, err = Decode([]byte(js))
		if err == nil {
			err = s.Prepare(pol)
		}
		t.Logf("  under max memory=512MiB: %v", err)
	}
}

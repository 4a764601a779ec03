//go:build linux

package e2e

import (
	"os"
	"path/filepath"
	"testing"
)

func TestZZAttackBrowserView(t *testing.T) {
	b, _, _ := browserSetup(t, "", "-egress-allow", "::1")
	rec := b.run(`{"version":1,"network":true,"limits":{"profile":"browser"},
	"files":{"run.sh":{"text":"#!/bin/sh\necho ran\n","mode":"0777"},"d/x":{"text":"y","mode":"0777"}},
	"steps":[
	{"name":"view","run":["sh","-c","id; grep -c GOOGLE_API_KEY /etc/chromium.d/apikeys; ls -la /etc/chromium.d /etc/chromium; for f in /etc/chromium.d/zz-airlock /etc/chromium.d/zzz /etc/foo /etc/chromium.d/apikeys; do (echo x >> $f) 2>&1; done; mv /etc/chromium.d/zz-airlock /tmp/ 2>&1; ln -s /x /etc/chromium.d/l 2>&1; grep -E 'chromium|/etc ' /proc/self/mountinfo; cat /etc/chromium.d/zz-airlock | tail -3"]},
	{"name":"modes","run":["sh","-c","ls -la . d; ./run.sh; chmod 4755 run.sh; stat -c '%a %U %n' run.sh; cp /bin/id ./id; chmod 6755 ./id; stat -c '%a' ./id; ./id; grep workspace /proc/self/mountinfo"]},
	{"name":"net","run":["sh","-c","echo P=$HTTPS_PROXY; for u in http://127.0.0.1:6379/ 'http://[::1]:6379/' http://0.0.0.0:6379/ http://localhost:6379/ http://127.0.0.1:5432/ http://192.0.2.2:6379/ http://127.0.0.1:3128/ 'http://[::ffff:127.0.0.1]:6379/' http://2130706433:6379/; do printf '%s ' \"$u\"; curl -s -o /dev/null -w '%{http_code}\\n' --max-time 5 -x $HTTPS_PROXY \"$u\"; done; curl -s --max-time 3 --noproxy '*' http://127.0.0.1:6379/; echo direct=$?; curl -s --max-time 3 --noproxy '*' http://192.0.2.2:6379/; echo directeth=$?; curl -s --max-time 3 --noproxy '*' 'http://[fd00::2]:6379/'; echo directv6=$?; for f in '' --no-proxy-server '--proxy-server=direct://'; do chromium --headless $f --dump-dom http://127.0.0.1:6379/ 2>&1 | head -c 200; echo \" [$f]\"; done"]}
	]}`)
	for i := range rec.Steps {
		s := stepOf(t, rec, i)
		t.Logf("step %s verdict %s exit %v\nstdout:\n%s\nstderr:\n%s", s.Name, s.Verdict, s.ExitCode, s.Stdout, s.Stderr)
	}
	t.Logf("egress: %s", mustJSON(t, rec.Egress))
	filepath.Walk(b.root, func(p string, fi os.FileInfo, err error) error {
		if err == nil {
			t.Logf("left on host: %s %v", p, fi.Mode())
		}
		return nil
	})
}

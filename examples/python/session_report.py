#!/usr/bin/env python3
"""The seed's flow call by call, through an Airlock session (HTTP API),
with the standard library only.

An agent opens a session whose workspace starts with the partner's CSV
export (downloaded by the worker with the partner's token, which the agent
never sees), looks at its header, decides which columns are parasitic,
writes that decision into the workspace, runs the cleaning step, reads the
report it produced, and closes the session: the output then goes through
its contract and the approval queue like any run's. With an approver's
token it accepts the parked output, then prints the published result:

    {"session_id": "...", "state": "promoted", "steps": ["look", "clean"], "result": {...}}

Environment:
    AIRLOCK_API_URL         the API (default http://127.0.0.1:8080)
    AIRLOCK_TOKEN           a token with runs:write and runs:read (required)
    AIRLOCK_APPROVER_TOKEN  a token with approvals:write (optional)
    PARTNER_URL             the partner's back office (default: the one a dev
                            worker, worker -dev, serves: its address is in
                            $XDG_RUNTIME_DIR/airlock/dev-partner-url, or
                            <temp dir>/airlock-<uid>/dev-partner-url)
    AIRLOCK_QUEUE           the queue (default: "default"); the worker's
                            policy must grant PARTNER_TOKEN to it
    AIRLOCK_TIMEOUT         seconds to wait in all (default 300)

Exit status: 0 promoted and printed; 1 anything else (the reason on stderr).
"""

import json
import os
import stat
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

from csv_report import APIError, call, wait

REPORT_SCHEMA = {
    "type": "object",
    "required": ["rows", "paid_revenue", "refund_rate"],
    "properties": {
        "rows": {"type": "integer", "minimum": 1},
        "paid_revenue": {"type": "number", "minimum": 0},
        "refund_rate": {"type": "number", "minimum": 0, "maximum": 1},
    },
}

# The cleaning step: drops the columns named in drop.txt (one per line),
# then computes the two indicators.
CLEAN = r"""
set -eu
awk -F, -v OFS=, -v drop="$(tr '\n' ',' < drop.txt)" '
NR == 1 {
	n = split(drop, d, ",")
	for (i = 1; i <= n; i++) if (d[i] != "") gone[d[i]] = 1
	for (i = 1; i <= NF; i++) {
		if (!($i in gone)) keep[++k] = i
		if ($i == "amount") a = i
		if ($i == "status") s = i
	}
}
{
	line = ""
	for (j = 1; j <= k; j++) line = line (j > 1 ? OFS : "") $(keep[j])
	print line > "out/clean.csv"
}
NR > 1 { rows++; if ($s == "paid") paid += $a; if ($s == "refunded") refunded++ }
END { printf "{\"rows\": %d, \"paid_revenue\": %.2f, \"refund_rate\": %.4f}\n", rows, paid, rows ? refunded / rows : 0 > "out/result.json" }
' in/export.csv
echo "kept $(head -1 out/clean.csv)"
"""


def session_call(base, token, sid, method, what, body=None, raw=None, binary=False, timeout=90):
    """Calls /v1/sessions/{sid}/{what}: JSON in and out, or raw bytes in
    (raw) or out (binary) for a file."""
    path = f"/v1/sessions/{urllib.parse.quote(sid, safe='')}/{what}"
    if raw is None and not binary:
        return call(base, token, method, path, body, timeout=timeout)
    hdrs = {"Authorization": "Bearer " + token}
    if raw is not None:
        hdrs["Content-Type"] = "application/octet-stream"
    req = urllib.request.Request(base + path, data=raw, method=method, headers=hdrs)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        raise APIError(e.code, json.loads(e.read() or b"{}")) from None


def dev_partner():
    """The address of a dev worker's partner, from the file it writes
    beside its Redis URL file (as enqueue finds its Redis), or ""."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    d = os.path.join(runtime, "airlock") if runtime else os.path.join(tempfile.gettempdir(), f"airlock-{os.getuid()}")
    try:
        # Only a directory and a file of this user's that no one else may
        # write, neither of them a link, as the CLIs read the dev worker's
        # Redis URL file: another user may create the directory in a
        # shared temp dir first, or make it a link to one of this user's.
        st = os.lstat(d)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
            return ""
        fd = os.open(os.path.join(d, "dev-partner-url"), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with open(fd, encoding="utf-8") as f:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
                return ""
            return f.read(4096).strip()
    except OSError:
        return ""


def main():
    base = os.environ.get("AIRLOCK_API_URL", "http://127.0.0.1:8080").rstrip("/")
    token = os.environ.get("AIRLOCK_TOKEN")
    if not token:
        print("session_report: set AIRLOCK_TOKEN (runs:write, runs:read)", file=sys.stderr)
        return 1
    approver = os.environ.get("AIRLOCK_APPROVER_TOKEN")
    partner = (os.environ.get("PARTNER_URL") or dev_partner()).rstrip("/")
    if not partner:
        print("session_report: set PARTNER_URL, or run a dev worker (worker -dev), whose partner this finds", file=sys.stderr)
        return 1
    deadline = time.monotonic() + float(os.environ.get("AIRLOCK_TIMEOUT", "300"))
    spec = {
        "version": 1,
        "timeout": "120s",
        "session": {"idle_timeout": "60s"},
        "secrets": ["PARTNER_TOKEN"],
        "inputs": [{
            "url": f"{partner}/export.csv?day={time.strftime('%Y-%m-%d')}",
            "path": "in/export.csv",
            "headers": {"Authorization": "Bearer ${secret:PARTNER_TOKEN}"},
        }],
        "files": {"clean.sh": CLEAN},
        "limits": {"memory": "128MiB"},
        "output": {"result": "out/result.json", "schema": REPORT_SCHEMA, "artifacts": ["out/clean.csv"]},
    }
    if os.environ.get("AIRLOCK_QUEUE"):
        spec["queue"] = os.environ["AIRLOCK_QUEUE"]

    _, opened = call(base, token, "POST", "/v1/sessions", spec)
    sid, queue = opened["session_id"], opened["queue"]
    print(f"session_report: opened session {sid} (expires {opened['expires_at']})", file=sys.stderr)

    # Look before deciding: the agent reads the export's header.
    _, look = session_call(base, token, sid, "POST", "steps", {"name": "look", "run": ["head", "-1", "in/export.csv"]})
    header = look["stdout"].strip().split(",")
    drop = [c for c in header if c.startswith("_")]
    print(f"session_report: header {header}; dropping {drop}", file=sys.stderr)

    session_call(base, token, sid, "PUT", "files/" + urllib.parse.quote("drop.txt", safe=""), raw="\n".join(drop).encode())
    _, clean = session_call(base, token, sid, "POST", "steps", {"name": "clean", "run": ["sh", "clean.sh"]})
    if clean["verdict"] != "ok":
        print(f"session_report: clean failed: {clean}", file=sys.stderr)
        return 1
    _, report = session_call(base, token, sid, "GET", "files/" + urllib.parse.quote("out/result.json", safe=""), binary=True)
    print(f"session_report: the step reported {report.decode().strip()}", file=sys.stderr)

    _, rec = session_call(base, token, sid, "POST", "close", timeout=150)
    print(f"session_report: closed: {rec['state']}", file=sys.stderr)
    if rec["state"] == "parked" and approver:
        _, a = call(base, approver, "POST", f"/v1/approvals/{urllib.parse.quote(rec['approval_id'], safe='')}/accept",
                    {"comment": "checked by the session_report example"})
        print(f"session_report: accepted {a['id']} as {a['decided_by']}", file=sys.stderr)
    rec = wait(base, token, sid, queue, "final", deadline)
    if rec["state"] != "promoted":
        print(f"session_report: session {sid} ended {rec['state']} ({rec.get('verdict')}): {rec.get('error', '')}", file=sys.stderr)
        return 1
    _, pub = call(base, token, "GET", f"/v1/runs/{urllib.parse.quote(sid, safe='')}/result?queue={urllib.parse.quote(queue)}")
    print(json.dumps({"session_id": sid, "state": rec["state"], "steps": [s["name"] for s in rec["steps"]], "result": pub["result"]}))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (APIError, TimeoutError, OSError) as e:
        print(f"session_report: {e}", file=sys.stderr)
        sys.exit(1)

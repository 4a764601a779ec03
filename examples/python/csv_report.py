#!/usr/bin/env python3
"""Run Airlock's csv-report demo through the HTTP API (cmd/api), with the
standard library only.

It runs the operator's csv-report action (examples/csv-report/actions: the
worker must load it, as `worker -dev` does, or with -actions) by name with
the day's params, long-polls the run until it is done, accepts
the parked output with an approver's token when one is given, waits until
the run is final, and prints the published result as JSON:

    {"task_id": "...", "state": "promoted", "result": {"rows": 500, ...}}

Environment:
    AIRLOCK_API_URL         the API (default http://127.0.0.1:8080)
    AIRLOCK_TOKEN           a token with runs:write and runs:read (required)
    AIRLOCK_APPROVER_TOKEN  a token with approvals:write, to accept the parked
                            output; without it, someone else must accept it
                            (approve accept ID), or the worker's policy
                            promote it (-policy examples/csv-report/policy.yaml)
    AIRLOCK_QUEUE           the queue (default: "default")
    AIRLOCK_TIMEOUT         seconds to wait in all (default 300)

Exit status: 0 promoted and printed; 1 anything else (the reason on stderr).
"""

import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

NOT_DONE = {"pending", "active", "scheduled", "retry", "aggregating"}
FINAL = {"completed", "failed", "promoted", "rejected", "expired"}


class APIError(Exception):
    """An error answer of the API: its application/problem+json body."""

    def __init__(self, status, problem):
        self.status, self.problem = status, problem
        detail = problem.get("detail") or problem.get("title") or "error"
        field = problem.get("field")
        super().__init__(f"{status} {detail}" + (f" (field {field})" if field else ""))


def call(base, token, method, path, body=None, headers=None, timeout=60):
    """Calls the API and returns (status, decoded JSON); raises APIError."""
    data = None
    hdrs = {"Authorization": "Bearer " + token, "Accept": "application/json"}
    if body is not None:
        data = json.dumps(body).encode()
        hdrs["Content-Type"] = "application/json"
    hdrs.update(headers or {})
    req = urllib.request.Request(base + path, data=data, method=method, headers=hdrs)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            problem = json.loads(raw)
        except ValueError:
            problem = {"detail": raw.decode(errors="replace")}
        raise APIError(e.code, problem) from None


def demo_call(queue):
    """The call of the csv-report action: its params, and the queue."""
    call = {"params": {"day": time.strftime("%Y-%m-%d")}}
    if queue:
        call["queue"] = queue
    return call


def wait(base, token, task, queue, until, deadline):
    """Long-polls the run until it is done (until="done") or final."""
    while True:
        # Each long poll lasts at most 30s, and never past the deadline.
        secs = max(1, min(30, int(deadline - time.monotonic())))
        path = f"/v1/runs/{urllib.parse.quote(task, safe='')}?" + urllib.parse.urlencode(
            {"queue": queue, "wait": f"{secs}s", "until": until})
        _, rec = call(base, token, "GET", path, timeout=90)
        state = rec["state"]
        if (until == "done" and state not in NOT_DONE) or state in FINAL:
            return rec
        if time.monotonic() > deadline:
            raise TimeoutError(f"task {task} is still {state}")
        print(f"csv_report: task {task} is {state}; waiting", file=sys.stderr)


def main():
    base = os.environ.get("AIRLOCK_API_URL", "http://127.0.0.1:8080").rstrip("/")
    token = os.environ.get("AIRLOCK_TOKEN")
    if not token:
        print("csv_report: set AIRLOCK_TOKEN (runs:write, runs:read)", file=sys.stderr)
        return 1
    approver = os.environ.get("AIRLOCK_APPROVER_TOKEN")
    deadline = time.monotonic() + float(os.environ.get("AIRLOCK_TIMEOUT", "300"))
    body = demo_call(os.environ.get("AIRLOCK_QUEUE"))

    # The key makes a retried POST safe: the same key gives the same task.
    key = "csv-report-py-" + str(uuid.uuid4())
    for attempt in range(3):
        try:
            status, enq = call(base, token, "POST", "/v1/actions/csv-report/runs", body, {"Idempotency-Key": key})
            break
        except (urllib.error.URLError, ConnectionError) as e:
            if attempt == 2:
                raise
            print(f"csv_report: {e}; retrying with the same Idempotency-Key", file=sys.stderr)
            time.sleep(1)
    task, queue = enq["task_id"], enq["queue"]
    print(f"csv_report: {'enqueued' if status == 201 else 'already enqueued'} task {task} in queue {queue}", file=sys.stderr)

    rec = wait(base, token, task, queue, "done", deadline)
    if rec["state"] == "parked":
        if approver:
            _, a = call(base, approver, "POST", f"/v1/approvals/{urllib.parse.quote(rec['approval_id'], safe='')}/accept",
                        {"comment": "checked by the csv_report example"})
            print(f"csv_report: accepted {a['id']} as {a['decided_by']}", file=sys.stderr)
        else:
            print(f"csv_report: parked as {rec['approval_id']}: waiting for an approver", file=sys.stderr)
        rec = wait(base, token, task, queue, "final", deadline)
    if rec["state"] != "promoted":
        print(f"csv_report: task {task} ended {rec['state']} ({rec.get('verdict')}): {rec.get('error', '')}", file=sys.stderr)
        return 1
    _, pub = call(base, token, "GET", f"/v1/runs/{urllib.parse.quote(task, safe='')}/result?queue={urllib.parse.quote(queue)}")
    print(json.dumps({"task_id": task, "state": rec["state"], "result": pub["result"]}))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (APIError, TimeoutError, urllib.error.URLError, OSError) as e:
        print(f"csv_report: {e}", file=sys.stderr)
        sys.exit(1)

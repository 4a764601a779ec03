// @ts-check
/**
 * Runs Airlock's csv-report demo through the HTTP API (cmd/api), with
 * Node 20's fetch and nothing else: plain JavaScript with JSDoc types, so
 * that `node csv_report.mjs` runs it as is and `tsc --checkJs` (or an
 * editor) type-checks it. The types are those of frontend/httpapi/openapi.json.
 *
 * It runs the operator's csv-report action (examples/csv-report/actions:
 * the worker must load it, as `worker -dev` does, or with -actions) by name
 * with the day's params, long-polls the run until it is done, accepts the parked output with an approver's token when one is
 * given, waits until the run is final, and prints the published result:
 *
 *   {"task_id": "...", "state": "promoted", "result": {"rows": 500, ...}}
 *
 * Environment: AIRLOCK_API_URL (default http://127.0.0.1:8080),
 * AIRLOCK_TOKEN (runs:write, runs:read; required), AIRLOCK_APPROVER_TOKEN
 * (approvals:write; optional), AIRLOCK_QUEUE, AIRLOCK_TIMEOUT (seconds,
 * 300).
 * Exit status: 0 promoted and printed; 1 anything else.
 */
import { randomUUID } from "node:crypto";
import { pathToFileURL } from "node:url";

/** @typedef {{type: string, title: string, status: number, detail?: string, field?: string, state?: string, decided_by?: string}} Problem */
/** @typedef {{task_id: string, queue: string, run_id: string, duplicate: boolean}} Enqueued */
/** @typedef {{task_id: string, run_id: string, queue: string, state: string, verdict: string, error?: string, approval_id?: string}} RunRecord */
/** @typedef {{id: string, state: string, decided_by?: string}} Approval */
/** @typedef {{where: string, manifest: object, result: unknown}} Published */

const NOT_DONE = new Set(["pending", "active", "scheduled", "retry", "aggregating"]);
const FINAL = new Set(["completed", "failed", "promoted", "rejected", "expired"]);

class APIError extends Error {
  /** @param {number} status @param {Problem} problem */
  constructor(status, problem) {
    super(`${status} ${problem.detail ?? problem.title}` + (problem.field ? ` (field ${problem.field})` : ""));
    this.status = status;
    this.problem = problem;
  }
}

/**
 * Calls the API; an error answer (application/problem+json) throws.
 * @template T
 * @param {string} base @param {string} token @param {string} method @param {string} path
 * @param {unknown} [body] @param {Record<string, string>} [headers]
 * @returns {Promise<{status: number, data: T}>}
 */
async function call(base, token, method, path, body, headers = {}) {
  /** @type {Record<string, string>} */
  const h = { Authorization: `Bearer ${token}`, Accept: "application/json", ...headers };
  if (body !== undefined) h["Content-Type"] = "application/json";
  const res = await fetch(base + path, {
    method, headers: h, body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(90_000),
  });
  const text = await res.text();
  if (!res.ok) {
    /** @type {Problem} */
    let problem;
    try { problem = JSON.parse(text); } catch { problem = { type: "", title: text, status: res.status }; }
    throw new APIError(res.status, problem);
  }
  return { status: res.status, data: JSON.parse(text) };
}

/**
 * The call of the csv-report action: its params, and the queue.
 * @param {string | undefined} queue
 */
function demoCall(queue) {
  /** @type {{params: {day: string}, queue?: string}} */
  const body = { params: { day: new Date().toISOString().slice(0, 10) } };
  if (queue) body.queue = queue;
  return body;
}

/**
 * Long-polls the run until it is done (until "done") or final.
 * @param {string} base @param {string} token @param {string} task @param {string} queue
 * @param {"done" | "final"} until @param {number} deadline
 * @returns {Promise<RunRecord>}
 */
async function wait(base, token, task, queue, until, deadline) {
  for (;;) {
    // Each long poll lasts at most 30s, and never past the deadline.
    const secs = Math.max(1, Math.min(30, Math.floor((deadline - Date.now()) / 1000)));
    const path = `/v1/runs/${encodeURIComponent(task)}?` + new URLSearchParams({ queue, wait: `${secs}s`, until });
    /** @type {{data: RunRecord}} */
    const { data: rec } = await call(base, token, "GET", path);
    if ((until === "done" && !NOT_DONE.has(rec.state)) || FINAL.has(rec.state)) return rec;
    if (Date.now() > deadline) throw new Error(`task ${task} is still ${rec.state}`);
    console.error(`csv_report: task ${task} is ${rec.state}; waiting`);
  }
}

async function main() {
  const env = process.env;
  const base = (env.AIRLOCK_API_URL ?? "http://127.0.0.1:8080").replace(/\/+$/, "");
  const token = env.AIRLOCK_TOKEN;
  if (!token) {
    console.error("csv_report: set AIRLOCK_TOKEN (runs:write, runs:read)");
    return 1;
  }
  const approver = env.AIRLOCK_APPROVER_TOKEN;
  const deadline = Date.now() + 1000 * Number(env.AIRLOCK_TIMEOUT ?? "300");
  const body = demoCall(env.AIRLOCK_QUEUE);

  // The key makes a retried POST safe: the same key gives the same task.
  const key = `csv-report-js-${randomUUID()}`;
  /** @type {{status: number, data: Enqueued} | undefined} */
  let posted;
  for (let attempt = 0; !posted; attempt++) {
    try {
      posted = await call(base, token, "POST", "/v1/actions/csv-report/runs", body, { "Idempotency-Key": key });
    } catch (e) {
      if (e instanceof APIError || attempt === 2) throw e;
      console.error(`csv_report: ${e}; retrying with the same Idempotency-Key`);
      await new Promise((r) => setTimeout(r, 1000));
    }
  }
  const { task_id: task, queue } = posted.data;
  console.error(`csv_report: ${posted.status === 201 ? "enqueued" : "already enqueued"} task ${task} in queue ${queue}`);

  let rec = await wait(base, token, task, queue, "done", deadline);
  if (rec.state === "parked") {
    if (approver) {
      /** @type {{data: Approval}} */
      const { data: a } = await call(base, approver, "POST",
        `/v1/approvals/${encodeURIComponent(rec.approval_id ?? "")}/accept`, { comment: "checked by the csv_report example" });
      console.error(`csv_report: accepted ${a.id} as ${a.decided_by}`);
    } else {
      console.error(`csv_report: parked as ${rec.approval_id}: waiting for an approver`);
    }
    rec = await wait(base, token, task, queue, "final", deadline);
  }
  if (rec.state !== "promoted") {
    console.error(`csv_report: task ${task} ended ${rec.state} (${rec.verdict}): ${rec.error ?? ""}`);
    return 1;
  }
  /** @type {{data: Published}} */
  const { data: pub } = await call(base, token, "GET",
    `/v1/runs/${encodeURIComponent(task)}/result?` + new URLSearchParams({ queue }));
  console.log(JSON.stringify({ task_id: task, state: rec.state, result: pub.result }));
  return 0;
}

export { APIError, call, wait, FINAL };

// Run as a program (node csv_report.mjs), not when imported.
if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  main().then(
    (code) => process.exit(code),
    (e) => {
      console.error(`csv_report: ${e instanceof Error ? e.message : e}`);
      process.exit(1);
    },
  );
}

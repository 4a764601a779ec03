/**
 * The seed's flow call by call, through an Airlock session (HTTP API), with
 * Node 20's fetch and nothing else (plain JavaScript with JSDoc types, as
 * csv_report.mjs, whose call and wait it uses).
 *
 * An agent opens a session whose workspace starts with the partner's CSV
 * export (downloaded by the worker with the partner's token, which the
 * agent never sees), looks at its header, decides which columns are
 * parasitic, writes that decision into the workspace, runs the cleaning
 * step, reads the report, and closes the session: the output goes through
 * its contract and the approval queue. With an approver's token it accepts
 * the parked output, then prints the published result:
 *
 *   {"session_id": "...", "state": "promoted", "steps": ["look", "clean"], "result": {...}}
 *
 * Environment: AIRLOCK_API_URL (default http://127.0.0.1:8080),
 * AIRLOCK_TOKEN (runs:write, runs:read; required), AIRLOCK_APPROVER_TOKEN
 * (approvals:write; optional), PARTNER_URL (default: the partner a dev
 * worker, worker -dev, serves: its address is in
 * $XDG_RUNTIME_DIR/airlock/dev-partner-url, or
 * <temp dir>/airlock-<uid>/dev-partner-url), AIRLOCK_QUEUE (the worker's policy must grant
 * PARTNER_TOKEN to it), AIRLOCK_TIMEOUT (seconds, 300).
 * Exit status: 0 promoted and printed; 1 anything else.
 */
import { closeSync, constants, fstatSync, lstatSync, openSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { APIError, call, wait } from "./csv_report.mjs";

/** @typedef {{name: string, verdict: string, exit_code?: number, stdout: string, stderr: string}} StepRecord */
/** @typedef {{session_id: string, task_id: string, queue: string, state: string, expires_at: string}} SessionOpened */

// The cleaning step is the Python example's: one script, two clients.
const py = readFileSync(new URL("../python/session_report.py", import.meta.url), "utf8");
const CLEAN = py.slice(py.indexOf('CLEAN = r"""') + 12, py.indexOf('"""', py.indexOf('CLEAN = r"""') + 12));

const SCHEMA = {
  type: "object",
  required: ["rows", "paid_revenue", "refund_rate"],
  properties: {
    rows: { type: "integer", minimum: 1 },
    paid_revenue: { type: "number", minimum: 0 },
    refund_rate: { type: "number", minimum: 0, maximum: 1 },
  },
};

/**
 * Sends raw bytes to, or reads them from, a session's file.
 * @param {string} base @param {string} token @param {string} sid @param {string} method
 * @param {string} path @param {RequestInit["body"]} [body] what to write (a string is
 * sent as UTF-8); none to read
 * @returns {Promise<Uint8Array>}
 */
async function file(base, token, sid, method, path, body) {
  /** @type {Record<string, string>} */
  const h = { Authorization: `Bearer ${token}` };
  if (body !== undefined) h["Content-Type"] = "application/octet-stream";
  const res = await fetch(`${base}/v1/sessions/${encodeURIComponent(sid)}/files/${encodeURIComponent(path)}`, {
    method, headers: h, body, signal: AbortSignal.timeout(90_000),
  });
  const bytes = new Uint8Array(await res.arrayBuffer());
  if (!res.ok) throw new APIError(res.status, JSON.parse(new TextDecoder().decode(bytes)));
  return bytes;
}

/**
 * The address of a dev worker's partner, from the file it writes beside
 * its Redis URL file (as enqueue finds its Redis), or "".
 * @returns {string}
 */
function devPartner() {
  const runtime = process.env.XDG_RUNTIME_DIR;
  const dir = runtime ? join(runtime, "airlock") : join(tmpdir(), `airlock-${process.getuid?.() ?? ""}`);
  /** @param {import("node:fs").Stats} st */
  const mine = (st) => st.uid === process.getuid?.() && (st.mode & 0o022) === 0;
  try {
    // Only a directory and a file of this user's that no one else may
    // write, neither of them a link, as the CLIs read the dev worker's
    // Redis URL file: another user may create the directory in a shared
    // temp dir first, or make it a link to one of this user's.
    const st = lstatSync(dir);
    if (!st.isDirectory() || !mine(st)) {
      return "";
    }
    const fd = openSync(join(dir, "dev-partner-url"), constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
    try {
      const fst = fstatSync(fd);
      if (!fst.isFile() || !mine(fst)) {
        return "";
      }
      return readFileSync(fd, "utf8").slice(0, 4096).trim();
    } finally {
      closeSync(fd);
    }
  } catch {
    return "";
  }
}

async function main() {
  const env = process.env;
  const base = (env.AIRLOCK_API_URL ?? "http://127.0.0.1:8080").replace(/\/+$/, "");
  const token = env.AIRLOCK_TOKEN;
  if (!token) {
    console.error("session_report: set AIRLOCK_TOKEN (runs:write, runs:read)");
    return 1;
  }
  const approver = env.AIRLOCK_APPROVER_TOKEN;
  const partner = (env.PARTNER_URL || devPartner()).replace(/\/+$/, "");
  if (!partner) {
    console.error("session_report: set PARTNER_URL, or run a dev worker (worker -dev), whose partner this finds");
    return 1;
  }
  const deadline = Date.now() + 1000 * Number(env.AIRLOCK_TIMEOUT ?? "300");
  /** @type {Record<string, unknown>} */
  const spec = {
    version: 1,
    timeout: "120s",
    session: { idle_timeout: "60s" },
    secrets: ["PARTNER_TOKEN"],
    inputs: [{
      url: `${partner}/export.csv?day=${new Date().toISOString().slice(0, 10)}`,
      path: "in/export.csv",
      headers: { Authorization: "Bearer ${secret:PARTNER_TOKEN}" },
    }],
    files: { "clean.sh": CLEAN },
    limits: { memory: "128MiB" },
    output: { result: "out/result.json", schema: SCHEMA, artifacts: ["out/clean.csv"] },
  };
  if (env.AIRLOCK_QUEUE) spec.queue = env.AIRLOCK_QUEUE;

  /** @type {{data: SessionOpened}} */
  const { data: opened } = await call(base, token, "POST", "/v1/sessions", spec);
  const sid = opened.session_id;
  const steps = `/v1/sessions/${encodeURIComponent(sid)}/steps`;
  console.error(`session_report: opened session ${sid} (expires ${opened.expires_at})`);

  // Look before deciding: the agent reads the export's header.
  /** @type {{data: StepRecord}} */
  const { data: look } = await call(base, token, "POST", steps, { name: "look", run: ["head", "-1", "in/export.csv"] });
  const header = look.stdout.trim().split(",");
  const drop = header.filter((c) => c.startsWith("_"));
  console.error(`session_report: header ${header}; dropping ${drop}`);

  await file(base, token, sid, "PUT", "drop.txt", drop.join("\n"));
  /** @type {{data: StepRecord}} */
  const { data: clean } = await call(base, token, "POST", steps, { name: "clean", run: ["sh", "clean.sh"] });
  if (clean.verdict !== "ok") throw new Error(`clean failed: ${JSON.stringify(clean)}`);
  const report = new TextDecoder().decode(await file(base, token, sid, "GET", "out/result.json"));
  console.error(`session_report: the step reported ${report.trim()}`);

  /** @type {{data: {state: string, approval_id?: string}}} */
  const { data: closed } = await call(base, token, "POST", `/v1/sessions/${encodeURIComponent(sid)}/close`);
  console.error(`session_report: closed: ${closed.state}`);
  if (closed.state === "parked" && approver) {
    /** @type {{data: {id: string, decided_by?: string}}} */
    const { data: a } = await call(base, approver, "POST",
      `/v1/approvals/${encodeURIComponent(closed.approval_id ?? "")}/accept`, { comment: "checked by the session_report example" });
    console.error(`session_report: accepted ${a.id} as ${a.decided_by}`);
  }
  const rec = await wait(base, token, sid, opened.queue, "final", deadline);
  if (rec.state !== "promoted") {
    console.error(`session_report: session ${sid} ended ${rec.state} (${rec.verdict}): ${rec.error ?? ""}`);
    return 1;
  }
  /** @type {{data: {result: unknown}}} */
  const { data: pub } = await call(base, token, "GET",
    `/v1/runs/${encodeURIComponent(sid)}/result?` + new URLSearchParams({ queue: opened.queue }));
  /** @type {{data: {steps: StepRecord[]}}} */
  const { data: full } = await call(base, token, "GET",
    `/v1/runs/${encodeURIComponent(sid)}?` + new URLSearchParams({ queue: opened.queue }));
  console.log(JSON.stringify({ session_id: sid, state: rec.state, steps: full.steps.map((s) => s.name), result: pub.result }));
  return 0;
}

main().then(
  (code) => process.exit(code),
  (e) => {
    console.error(`session_report: ${e instanceof Error ? e.message : e}`);
    process.exit(1);
  },
);

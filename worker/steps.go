//go:build linux

package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-run/airlock/internal/isolation/sandbox"
	"github.com/airlock-run/airlock/internal/network/egress"
	"github.com/airlock-run/airlock/internal/network/fetch"
	"github.com/airlock-run/airlock/internal/secrets"
	"github.com/airlock-run/airlock/limits"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/tasks"
	"github.com/airlock-run/airlock/tmpfs"
)

// Bounds of what a run record lists of out/.
const maxListed = 256

// run carries the job out in a fresh workspace of its slot: its files, its
// inputs, its steps, then its output. It fills the record with what each
// phase found.
func (w *Worker) run(ctx context.Context, j *job) outcome {
	spec, rec := j.spec, j.rec
	if spec.Network {
		er := egress.NewRun(w.egress, egress.Limits{MaxBytes: w.cfg.EgressMaxBytes, MaxConns: w.cfg.EgressMaxConns, IdleTimeout: w.cfg.EgressIdleTimeout})
		j.egress = er
		defer func() { rec.Egress = er.Close() }()
	}
	defer w.stand(j) // whichever seat the run holds at its end
	deadline := time.Now().Add(time.Duration(spec.Timeout))
	if j.session != nil && j.session.resumedHold {
		// A session taken up from its checkpoint: no files, inputs or
		// spec steps again; its calls borrow slots as they come.
		deadline = j.deadline
		steps, closed, err := w.serveSession(ctx, j, deadline)
		return w.finish(ctx, j, steps, closed, err, deadline)
	}
	if err := w.sit(ctx, j); err != nil {
		return outcome{err: err}
	}
	ws := j.seat.ws
	rec.Workspace.QuotaBytes = ws.Quota()
	inline := make(map[string]string, len(spec.Files))
	var modes map[string]fs.FileMode
	for p, f := range spec.Files {
		inline[p] = string(f)
		if m, ok := spec.FileModes[p]; ok {
			if modes == nil {
				modes = map[string]fs.FileMode{}
			}
			modes[p] = fs.FileMode(m)
		}
	}
	n, err := ws.WriteFilesMode(inline, modes)
	rec.Workspace.InputBytes = n
	if err != nil {
		rec.State, rec.Verdict, rec.Error = record.StateFailed, record.VerdictWorkspaceQuota, "write files: "+err.Error()
		if !errors.Is(err, syscall.ENOSPC) {
			rec.Verdict = record.VerdictError
		}
		return outcome{}
	}
	if len(spec.Inputs) > 0 {
		if out, ok := w.fetchTraced(ctx, j, ws, deadline); !ok {
			return out
		}
	}
	var steps stepsResult
	closed := true
	if spec.Session != nil {
		steps, closed, err = w.serveSession(ctx, j, deadline)
	} else {
		steps, err = w.runSteps(ctx, j, j.seat.box, ws, deadline)
	}
	return w.finish(ctx, j, steps, closed, err, deadline)
}

// finish fills the record with what the steps phase found and, when the
// run came to its output, reads it (check, decide, settle).
func (w *Worker) finish(ctx context.Context, j *job, steps stepsResult, closed bool, err2 error, deadline time.Time) outcome {
	spec, rec := j.spec, j.rec
	rec.Steps = steps.records
	if rec.Session != nil {
		rec.Session.StepsFailed = stepsFailed(steps.records)
	}
	if err2 != nil {
		return outcome{err: err2}
	}
	rec.State, rec.Verdict, rec.Error = steps.state, steps.verdict, steps.err
	// A session that ended parked (expired, canceled) has no workspace
	// here to measure or list: its last call's figures stand.
	ws := j.seat.ws
	if ws == nil {
		return outcome{}
	}
	// Measured before the output is read: the approval's run summary,
	// and so the manifest of its publication, copies rec.Workspace.
	used, full, err := ws.Usage()
	if err == nil {
		rec.Workspace.UsedBytes, rec.Workspace.Full = used, full
	}
	var out outcome
	if closed && rec.State == record.StateCompleted && spec.Output != nil && (spec.Output.Result != "" || len(spec.Output.Artifacts) > 0) {
		out = w.output(ctx, j, ws, deadline)
	}
	files, truncated, err := ws.List("out", maxListed)
	if err == nil {
		rec.Files = files
		if truncated {
			rec.Error = joinErr(rec.Error, fmt.Sprintf("out/ has more than %d entries; listing truncated", maxListed))
		}
	}
	return out
}

// stepsResult is what the steps phase found.
type stepsResult struct {
	records []record.Step
	state   record.State   // completed, or failed at the first failing step
	verdict record.Verdict // that step's
	err     string         // the task's deadline, when it ended the run
}

// runSteps runs the spec's steps in order until one fails. Its error is the
// worker's failure, or errHandedBack; the steps that ran are in the result
// either way.
func (w *Worker) runSteps(ctx context.Context, j *job, box *sandbox.Slot, ws *tmpfs.Workspace, deadline time.Time) (stepsResult, error) {
	spec, rec := j.spec, j.rec
	r := stepsResult{records: []record.Step{}, state: record.StateCompleted, verdict: record.VerdictOK}
	// What the record keeps of the steps' output, all steps together, is
	// taken from one budget while it is read.
	keep := sandbox.NewKeepBudget(int64(spec.MaxRecordBytes))
	defer func() {
		for _, st := range r.records {
			if keep.Left() <= 0 && (st.StdoutTruncated || st.StderrTruncated) {
				rec.KeptOutput.Reached = true
			}
		}
	}()
	for i, st := range spec.Steps {
		sr, res, err := w.runStep(ctx, j, box, ws, st, min(spec.StepTimeout(i), time.Until(deadline)), keep)
		if err != nil {
			if errors.Is(err, sandbox.ErrHelperDied) {
				// Keep the step, and what it wrote, in the record.
				r.records = append(r.records, sr)
			}
			return r, err
		}
		r.records = append(r.records, sr)
		if res.Canceled {
			return r, errHandedBack
		}
		if sr.Verdict != record.VerdictOK {
			r.state, r.verdict = record.StateFailed, sr.Verdict
			if sr.Verdict == record.VerdictTimeout && time.Until(deadline) <= 0 {
				r.err = fmt.Sprintf("task timeout %s reached in step %s", spec.Timeout, st.Name)
			}
			break
		}
	}
	return r, nil
}

// sandboxStep runs one step in the job's sandbox for at most timeout, keeping
// its output from keep, and returns its record entry (its output's
// secrets redacted) with the sandbox's result. Its error is the worker's
// failure: the entry then says so when the helper died.
func (w *Worker) sandboxStep(ctx context.Context, j *job, box *sandbox.Slot, ws *tmpfs.Workspace, st tasks.Step, timeout time.Duration, keep *sandbox.KeepBudget) (record.Step, sandbox.Result, error) {
	spec, rec := j.spec, j.rec
	cpu := time.Duration(spec.Limits.CPUTime)
	env := st.Env
	if !j.secrets.Empty() || spec.Network {
		env = make(map[string]string, len(st.Env)+4)
		for k, v := range st.Env {
			env[k] = tasks.Expand(v, j.secrets.Value)
		}
	}
	if spec.Network {
		// The only way out: the worker's proxy, on the step's loopback.
		for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
			env[k] = egress.URL
		}
		if _, set := env["NODE_USE_ENV_PROXY"]; !set {
			env["NODE_USE_ENV_PROXY"] = "1" // recent Node.js releases then honour the above
		}
	}
	step := sandbox.Step{
		Argv: st.Run, Env: env, Stdin: st.Stdin,
		Limits: spec.Limits, Timeout: max(timeout, 0), Keep: keep, Dir: st.Cwd,
	}
	var lv *liveStep
	if !w.cfg.NoLiveOutput {
		lv = w.startLive(rec.TaskID, st.Name, j.secrets) // live.go
		step.Live = lv.add
	}
	res, err := box.Run(ctx, step)
	if lv != nil {
		lv.finish(res, err != nil)
	}
	// What a step printed of a secret is redacted before it is encoded
	// for the record.
	res.Stdout.Data = redactCaptured(j.secrets, res.Stdout)
	res.Stderr.Data = redactCaptured(j.secrets, res.Stderr)
	if err != nil {
		sr := stepRecord(st, res, false, cpu)
		sr.Verdict, sr.Error = record.VerdictError, err.Error()
		return sr, res, fmt.Errorf("step %s: %w", st.Name, err)
	}
	_, full, _ := ws.Usage()
	sr := stepRecord(st, res, full, cpu)
	if h := execHint(spec, st, sr); h != "" {
		sr.Error += h
	}
	sr.Argv = clipArgv(sr.Argv) // now: a session keeps its steps' entries until its close
	if sr.Verdict == record.VerdictTimeout && len(sr.LimitsHit) > 0 && sr.Error == "" {
		sr.Error = hitBeforeTimeout(sr, res, spec.Limits)
	}
	w.log.Info().Str("task_id", rec.TaskID).Str("trace_id", rec.TraceID).Str("run_id", spec.RunID).Str("step", st.Name).
		Str("verdict", string(sr.Verdict)).Interface("exit_code", sr.ExitCode).Str("signal", sr.Signal).
		Float64("duration_ms", sr.DurationMS).Float64("cpu_ms", sr.CPUMS).Int64("max_rss_kb", sr.MaxRSSKB).
		Int64("memory_peak_bytes", sr.MemoryPeakBytes).Int64("stdout_bytes", sr.StdoutBytes).
		Int64("stderr_bytes", sr.StderrBytes).Int("killed_left_behind", res.Killed).Msg("step")
	return sr, res, nil
}

// execHint explains a step whose program could not be run because it is
// one of the spec's files, written without an execute bit: "" otherwise.
func execHint(spec *tasks.Spec, st tasks.Step, sr record.Step) string {
	if sr.Verdict != record.VerdictExecError || !strings.Contains(sr.Error, "permission denied") ||
		len(st.Run) == 0 || !strings.Contains(st.Run[0], "/") || strings.HasPrefix(st.Run[0], "/") {
		return ""
	}
	p := path.Clean(st.Run[0])
	if _, ok := spec.Files[p]; !ok || spec.Mode(p)&0o111 != 0 {
		return ""
	}
	return fmt.Sprintf(`: files[%q] is written %s, not executable: give it a mode, {"text": "...", "mode": "0755"}, or run it with its interpreter, ["sh", %q]`,
		p, spec.Mode(p), p)
}

// redactCaptured is what the record may keep of a captured stream: the
// run's secrets redacted and, when the stream was cut at its cap or the
// run's budget, no tail that begins a secret (cut there, it would escape
// redaction).
func redactCaptured(s *secrets.Set, c sandbox.Capture) []byte {
	b, _ := s.RedactBytes(c.Data)
	if c.Truncated {
		b = s.TrimCut(b)
	}
	return b
}

// stepRecord turns a sandbox result into the step's record and verdict.
func stepRecord(st tasks.Step, r sandbox.Result, workspaceFull bool, cpuLimit time.Duration) record.Step {
	sr := record.Step{
		Name: st.Name, Argv: st.Run, Cwd: st.Cwd, Error: r.StartError,
		DurationMS: ms(r.Duration), CPUMS: ms(r.CPU), MaxRSSKB: r.MaxRSSKB,
		MemoryPeakBytes: r.MemoryPeak, OOMKills: r.OOMKills,
		StdoutBytes: r.Stdout.Total, StderrBytes: r.Stderr.Total,
		StdoutTruncated: r.Stdout.Truncated, StderrTruncated: r.Stderr.Truncated,
	}
	sr.Stdout, sr.StdoutEncoding = record.Text(r.Stdout.Data)
	sr.Stderr, sr.StderrEncoding = record.Text(r.Stderr.Data)
	if r.Exited {
		code := r.ExitCode
		sr.ExitCode = &code
	}
	if r.Signal != 0 {
		sr.Signal = unix.SignalName(r.Signal)
	}
	sr.Verdict = classify(r, workspaceFull, cpuLimit)
	sr.LimitsHit = limitsHit(r, sr.Verdict)
	if r.PidsRefused > 0 {
		sr.PidsRefused = r.PidsRefused
	}
	return sr
}

// hitBeforeTimeout is the error of a step that timed out after hitting a
// limit, its likely cause (a program that waits for a thread or a
// process it could not start, or a page it could not get), with when the
// hit was first seen.
func hitBeforeTimeout(sr record.Step, r sandbox.Result, l limits.Set) string {
	var what []string
	for _, h := range sr.LimitsHit {
		switch h {
		case record.LimitProcesses:
			what = append(what, fmt.Sprintf("processes=%d (%s refused%s)", l.Processes, count(sr.PidsRefused, "fork", "forks"), firstBy(r.PidsHitBy)))
		case record.LimitMemory:
			what = append(what, fmt.Sprintf("memory=%s (%s killed%s)", l.Memory, count(sr.OOMKills, "process", "processes"), firstBy(r.OOMHitBy)))
		default:
			what = append(what, h)
		}
	}
	msg := fmt.Sprintf("hit %s, then timed out: the step likely waited on what the limit refused; raise limits.%s (within the operator's -max-limits)",
		strings.Join(what, ", "), sr.LimitsHit[0])
	b := limits.Profiles["browser"]
	switch {
	case sr.LimitsHit[0] == record.LimitProcesses && l.Processes < b.Processes:
		msg += fmt.Sprintf(`; a browser needs about %d ("limits": {"profile": "browser"})`, b.Processes)
	case sr.LimitsHit[0] == record.LimitMemory && l.Memory < b.Memory:
		msg += fmt.Sprintf(`; a browser needs about %s ("limits": {"profile": "browser"})`, b.Memory)
	}
	return msg
}

// count is n with its noun, one or many.
func count(n int64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// firstBy says when a limit's first hit was seen, "" when it was not.
func firstBy(by time.Duration) string {
	if by <= 0 {
		return ""
	}
	return fmt.Sprintf(", the first by %.1f s", by.Seconds())
}

// limitsHit names the limits the kernel reported reached during a step:
// refused forks (the pids group's events), OOM kills, and the verdicts
// that are a limit's signal. A step that timed out after hitting one says
// so in its error, which is its likely cause.
func limitsHit(r sandbox.Result, v record.Verdict) []string {
	var hit []string
	if r.PidsRefused > 0 {
		hit = append(hit, record.LimitProcesses)
	}
	if r.OOMKills > 0 || v == record.VerdictMemory {
		hit = append(hit, record.LimitMemory)
	}
	switch v {
	case record.VerdictCPUTime:
		hit = append(hit, record.LimitCPUTime)
	case record.VerdictFileSize:
		hit = append(hit, record.LimitFileSize)
	case record.VerdictOutputLimit:
		hit = append(hit, record.LimitOutput)
	}
	return hit
}

// classify names what ended a step, and never guesses: a cause it cannot
// know shows as "exit" or "signal" with the code or signal in the record.
func classify(r sandbox.Result, workspaceFull bool, cpuLimit time.Duration) record.Verdict {
	switch {
	case r.StartError != "":
		return record.VerdictExecError
	case r.Canceled:
		return record.VerdictCanceled
	case r.OutputLimit:
		// The worker killed the step's tree: it wrote more than
		// limits.output_total; whatever else it met after, that ended it.
		return record.VerdictOutputLimit
	case r.OOMKills > 0:
		// The kernel killed a process of the step at its cgroup's memory
		// limit: whatever the step did next (exit, hang until its
		// deadline), its work was cut short by the limit.
		return record.VerdictMemory
	case r.TimedOut:
		return record.VerdictTimeout
	case r.Exited && r.ExitCode == 0:
		return record.VerdictOK
	case r.Signal == syscall.SIGXCPU:
		return record.VerdictCPUTime
	case r.Signal == syscall.SIGKILL && r.CPU >= cpuLimit.Truncate(time.Second)+time.Second:
		// RLIMIT_CPU's hard limit (soft + 1s) kills a process that
		// survived SIGXCPU; its own CPU time shows it reached it.
		return record.VerdictCPUTime
	case r.Signal == syscall.SIGXFSZ:
		return record.VerdictFileSize
	case workspaceFull:
		// The step failed while its workspace was full: the write that
		// failed with ENOSPC is the known cause.
		return record.VerdictWorkspaceQuota
	case r.Signal != 0:
		return record.VerdictSignal
	}
	return record.VerdictExit
}

// fetchInputs downloads the spec's inputs into the workspace, in order,
// each within the task's deadline. It returns false, with what report must
// do, when one failed: the run fails with the verdict fetch, and is tried
// again when the failure may pass (a 5xx, a broken connection).
func (w *Worker) fetchInputs(ctx context.Context, j *job, ws *tmpfs.Workspace, deadline time.Time) (outcome, bool) {
	runCtx := ctx
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	for i, in := range j.spec.Inputs {
		// The URL the request goes to: its host must be granted every
		// secret the headers carry (checked before they are expanded).
		if err := w.fetchGrant(j.spec, i, in.URL); err != nil {
			refuseInput(j.rec, j.spec, i, err)
			return outcome{}, false
		}
		headers := make(map[string]string, len(in.Headers))
		for k, v := range in.Headers {
			headers[k] = tasks.Expand(v, j.secrets.Value)
		}
		res, err := w.fetcher.Fetch(ctx, fetchDest{ws}, fetch.Request{
			URL: in.URL, Path: in.Path, MaxBytes: int64(in.MaxBytes), SHA256: in.SHA256, Headers: headers,
		})
		j.rec.Inputs = append(j.rec.Inputs, res)
		w.log.Info().Str("task_id", j.rec.TaskID).Str("trace_id", j.rec.TraceID).Str("url", j.secrets.Redact(res.URL)).Int("status", res.Status).
			Int64("bytes", res.Bytes).Float64("duration_ms", res.DurationMS).Str("error", j.secrets.Redact(res.Error)).Msg("input")
		if err != nil && runCtx.Err() != nil {
			return outcome{err: errHandedBack}, false // the worker is shutting down
		}
		if err != nil {
			var fe *fetch.Error
			transient := errors.As(err, &fe) && fe.Transient
			j.rec.State, j.rec.Verdict = record.StateFailed, record.VerdictFetch
			j.rec.Error = fmt.Sprintf("inputs[%d] %s: %v", i, res.URL, err)
			return outcome{retry: transient}, false
		}
	}
	return outcome{}, true
}

// fetchDest is a workspace as a download's destination.
type fetchDest struct{ ws *tmpfs.Workspace }

func (d fetchDest) WriteStream(rel string, r io.Reader, max int64) (int64, error) {
	n, err := d.ws.WriteStream(rel, r, max)
	if errors.Is(err, tmpfs.ErrStreamTooLarge) {
		err = fmt.Errorf("%w: %v", fetch.ErrTooLarge, err)
	}
	return n, err
}

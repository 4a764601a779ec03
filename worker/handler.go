package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/airlock-run/airlock/internal/sandbox"
	"github.com/airlock-run/airlock/promote"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/tasks"
	"github.com/hibiken/asynq"
	"golang.org/x/sys/unix"
)

// Bounds of what a run record lists of out/.
const maxListed = 256

// errHandedBack marks a run interrupted by shutdown: the task goes back to
// its queue and will run again, so no record is written.
var errHandedBack = errors.New("worker shutting down: task handed back")

// handle is the asynq handler of TypeRun.
func (w *Worker) handle(ctx context.Context, t *asynq.Task) error {
	w.inflight.Add(1)
	defer w.inflight.Done()
	rec := w.newRecord(ctx)
	log := w.log.With().Str("task_id", rec.TaskID).Int("attempt", rec.Attempt).Logger()

	spec, err := w.decode(t.Payload())
	if err != nil {
		rec.RunID = "" // unknown: the payload did not say
		rec.State, rec.Verdict, rec.Error = record.StateFailed, record.VerdictError, "spec rejected: "+err.Error()
		w.finish(ctx, t, &rec)
		w.emit(ctx, &rec)
		return fmt.Errorf("%s: %w", rec.Error, asynq.SkipRetry)
	}
	rec.RunID, rec.Queue, rec.MaxRetry, rec.Limits = spec.RunID, spec.Queue, *spec.MaxRetry, spec.Limits
	log = log.With().Str("run_id", spec.RunID).Logger()
	log.Info().Str("queue", spec.Queue).Int("steps", len(spec.Steps)).Msg("task start")

	var s *slot
	select {
	case s = <-w.slots:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { w.slots <- s }()

	// Steps are canceled when the worker shuts down; the task's own
	// deadline is enforced per step by the sandbox.
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-w.stopping:
			cancel()
		case <-runCtx.Done():
		}
	}()
	err = w.run(runCtx, spec, s, &rec)
	if errors.Is(err, errHandedBack) {
		log.Warn().Msg("task interrupted by shutdown; handing it back to the queue")
		<-ctx.Done() // asynq requeues the task when its shutdown timeout ends
		return ctx.Err()
	}
	if err != nil {
		// The worker failed, not the action: asynq retries it, unless this
		// was the last attempt, which the events stream must hear of.
		rec.State, rec.Verdict, rec.Error = record.StateFailed, record.VerdictError, err.Error()
		w.finish(ctx, t, &rec)
		if max, ok := asynq.GetMaxRetry(ctx); ok && rec.Attempt > max {
			w.emit(ctx, &rec)
		}
		return err
	}
	w.finish(ctx, t, &rec)
	switch rec.State {
	case record.StateCompleted, record.StateFailed, record.StateParked:
		w.emit(ctx, &rec) // the approval store emits accepted and promoted
	}
	if rec.State == record.StateFailed {
		// A step's verdict is deterministic enough: never run it again.
		return fmt.Errorf("run failed with verdict %s: %w", rec.Verdict, asynq.SkipRetry)
	}
	return nil
}

func (w *Worker) newRecord(ctx context.Context) record.Run {
	id, _ := asynq.GetTaskID(ctx)
	n, _ := asynq.GetRetryCount(ctx)
	q, _ := asynq.GetQueueName(ctx)
	return record.Run{
		TaskID: id, Queue: q, Attempt: n + 1, StartedAt: time.Now().UTC(),
		Worker: w.name + " " + Version, Isolation: w.isolation, Steps: []record.Step{},
	}
}

// decode checks the payload again: the enqueuer is not trusted.
func (w *Worker) decode(payload []byte) (*tasks.Spec, error) {
	if len(payload) > w.cfg.MaxPayload {
		return nil, tasks.PayloadError(len(payload), w.cfg.MaxPayload)
	}
	spec, err := tasks.Decode(payload)
	if err != nil {
		return nil, err
	}
	if err := spec.Prepare(w.cfg.Policy); err != nil {
		return nil, err
	}
	return spec, nil
}

// run carries the spec out in a fresh workspace of slot s and fills rec.
// It returns an error only when the worker, not the action, failed.
func (w *Worker) run(ctx context.Context, spec *tasks.Spec, s *slot, rec *record.Run) error {
	rec.Isolation.UID = s.uidN
	box, err := s.sandboxFor(spec.Network)
	if err != nil {
		return fmt.Errorf("network sandbox: %w", err)
	}
	if spec.Network {
		// Say what this run's helper had, not the default one's.
		net := isolationOf(box.Status())
		rec.Isolation.Root, rec.Isolation.Landlock, rec.Isolation.Seccomp = net.Root, net.Landlock, net.Seccomp
		rec.Isolation.IPC, rec.Isolation.Keys, rec.Isolation.FDs = net.IPC, net.Keys, net.FDs
		rec.Isolation.Network = "host network (allowed by the operator, asked by the spec)"
	}
	ws, err := s.area.Create(int64(spec.Limits.Workspace))
	if err != nil {
		return fmt.Errorf("create workspace: %w", err)
	}
	defer func() {
		if err := ws.Remove(); err != nil {
			w.log.Error().Err(err).Str("task_id", rec.TaskID).Msg("remove workspace; renewing the slot's workspace and restarting its helpers")
			s.renew(w)
		}
	}()
	rec.Workspace.QuotaBytes = ws.Quota()
	n, err := ws.WriteFiles(spec.Files)
	rec.Workspace.InputBytes = n
	if err != nil {
		rec.State, rec.Verdict, rec.Error = record.StateFailed, record.VerdictWorkspaceQuota, "write files: "+err.Error()
		if !errors.Is(err, syscall.ENOSPC) {
			rec.Verdict = record.VerdictError
		}
		return nil
	}
	deadline := time.Now().Add(time.Duration(spec.Timeout))
	rec.State, rec.Verdict = record.StateCompleted, record.VerdictOK
	for i, st := range spec.Steps {
		timeout := min(spec.StepTimeout(i), time.Until(deadline))
		res, err := box.Run(ctx, sandbox.Step{
			Argv: st.Run, Env: st.Env, Stdin: st.Stdin,
			Limits: spec.Limits, Timeout: max(timeout, 0),
		})
		if err != nil {
			if errors.Is(err, sandbox.ErrHelperDied) {
				// Keep the step, and what it wrote, in the record.
				sr := stepRecord(st, res, false, time.Duration(spec.Limits.CPUTime))
				sr.Verdict, sr.Error = record.VerdictError, err.Error()
				rec.Steps = append(rec.Steps, sr)
			}
			return fmt.Errorf("step %s: %w", st.Name, err)
		}
		_, full, _ := ws.Usage()
		sr := stepRecord(st, res, full, time.Duration(spec.Limits.CPUTime))
		w.log.Info().Str("task_id", rec.TaskID).Str("run_id", spec.RunID).Str("step", st.Name).
			Str("verdict", sr.Verdict).Interface("exit_code", sr.ExitCode).Str("signal", sr.Signal).
			Float64("duration_ms", sr.DurationMS).Float64("cpu_ms", sr.CPUMS).Int64("max_rss_kb", sr.MaxRSSKB).Int64("memory_peak_bytes", sr.MemoryPeakBytes).
			Int64("stdout_bytes", sr.StdoutBytes).Int64("stderr_bytes", sr.StderrBytes).Int("killed_left_behind", res.Killed).
			Msg("step")
		rec.Steps = append(rec.Steps, sr)
		if res.Canceled {
			return errHandedBack
		}
		if sr.Verdict != record.VerdictOK {
			rec.State, rec.Verdict = record.StateFailed, sr.Verdict
			if sr.Verdict == record.VerdictTimeout && time.Until(deadline) <= 0 {
				rec.Error = fmt.Sprintf("task timeout %s reached in step %s", spec.Timeout, st.Name)
			}
			break
		}
	}
	if rec.State == record.StateCompleted && spec.Output != nil && (spec.Output.Result != "" || len(spec.Output.Artifacts) > 0) {
		if err := w.output(ctx, spec, ws, rec, deadline, s.uidN); err != nil {
			return err
		}
	}
	used, full, err := ws.Usage()
	if err == nil {
		rec.Workspace.UsedBytes, rec.Workspace.Full = used, full
	}
	files, truncated, err := ws.List("out", maxListed)
	if err == nil {
		rec.Files = files
		if truncated {
			rec.Error = joinErr(rec.Error, fmt.Sprintf("out/ has more than %d entries; listing truncated", maxListed))
		}
	}
	return nil
}

func joinErr(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// finish completes and stores the record: as the task's result and in the log.
func (w *Worker) finish(ctx context.Context, t *asynq.Task, rec *record.Run) {
	rec.FinishedAt = time.Now().UTC()
	rec.DurationMS = ms(rec.FinishedAt.Sub(rec.StartedAt))
	b, err := json.Marshal(rec)
	if err == nil {
		_, err = t.ResultWriter().Write(b)
	}
	ev := w.log.Info()
	if rec.State != record.StateCompleted {
		ev = w.log.Warn()
	}
	if err != nil {
		ev = w.log.Error().AnErr("result_error", err)
	}
	ev.Str("task_id", rec.TaskID).Str("run_id", rec.RunID).Int("attempt", rec.Attempt).
		Str("state", rec.State).Str("verdict", rec.Verdict).Str("error", rec.Error).
		Float64("duration_ms", rec.DurationMS).Int64("bytes_written", rec.Workspace.UsedBytes).
		Int64("input_bytes", rec.Workspace.InputBytes).Int("steps", len(rec.Steps)).Msg("task end")
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// stepRecord turns a sandbox result into the step's record and verdict.
func stepRecord(st tasks.Step, r sandbox.Result, workspaceFull bool, cpuLimit time.Duration) record.Step {
	sr := record.Step{
		Name: st.Name, Argv: st.Run, Error: r.StartError,
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
	return sr
}

// classify names what ended a step, and never guesses: a cause it cannot
// know shows as "exit" or "signal" with the code or signal in the record.
func classify(r sandbox.Result, workspaceFull bool, cpuLimit time.Duration) string {
	switch {
	case r.StartError != "":
		return record.VerdictExecError
	case r.Canceled:
		return record.VerdictCanceled
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

// handlePromote is the asynq handler of promote.TypePromote.
func (w *Worker) handlePromote(ctx context.Context, t *asynq.Task) error {
	var p promote.Payload
	if err := json.Unmarshal(t.Payload(), &p); err != nil || p.ApprovalID == "" {
		return fmt.Errorf("promote: bad payload: %w", asynq.SkipRetry)
	}
	log := w.log.With().Str("approval_id", p.ApprovalID).Logger()
	m, published, err := w.promoter.Promote(ctx, p.ApprovalID)
	if errors.Is(err, promote.ErrRefused) {
		log.Error().Err(err).Msg("promotion refused")
		return fmt.Errorf("%v: %w", err, asynq.SkipRetry)
	}
	if err != nil {
		log.Warn().Err(err).Msg("promotion failed; asynq retries it")
		return err
	}
	log.Info().Str("run_id", m.RunID).Bool("published", published).Str("to", w.cfg.Sink.Where(m.RunID, m.TaskID)).
		Int("artifacts", len(m.Artifacts)).Msg("promoted")
	return nil
}

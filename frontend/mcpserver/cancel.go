package mcpserver

import (
	"context"
	"errors"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/record"
)

// cancel_run cancels a run of the agent's own: one whose principal is the
// server's (Options.Principal), in one of its queues. A run another
// principal enqueued (or none) is unknown here, as get_run says
// (ownRun): nothing is done to it.

// cancelTool is cancel_run's definition.
func cancelTool(sc schemas) *mcp.Tool {
	no, yes := false, true
	return &mcp.Tool{
		Name:  ToolCancelRun,
		Title: "Cancel a run",
		Description: "Cancel a run this server enqueued (its principal is this server's): a pending run is taken off its queue, " +
			"a running one is stopped (its processes killed). Either way it ends canceled, is never run again and publishes nothing. " +
			"Returns the run record (state canceled; active when the worker has not stopped it yet: get_run follows it). " +
			"A run that was over already (completed, failed, parked...) is an error saying its state; another principal's run is not found.",
		InputSchema:  sc.cancelRun,
		OutputSchema: sc.out[ToolCancelRun],
		Annotations:  &mcp.ToolAnnotations{Title: "Cancel a run", DestructiveHint: &yes, IdempotentHint: true, OpenWorldHint: &no},
	}
}

// cancelRun is cancel_run.
func (s *server) cancelRun(ctx context.Context, req *mcp.CallToolRequest) (any, error) {
	var full bool
	taskID, q, _, err := s.runRecord(ctx, req, arg{"full", &full}) // the agent's own run only
	if err != nil {
		return nil, err
	}
	rec, err := s.c.Cancel(ctx, q, taskID)
	var fe *airlock.FinalError
	if errors.As(err, &fe) {
		return nil, &stateError{state: fe.Record.State, msg: fmt.Sprintf("task %s is already %s: nothing to cancel (%s)", taskID, fe.Record.State, note(fe.Record))}
	}
	if err != nil {
		return nil, readError(err)
	}
	out := &runOut{Record: s.answerRecord(rec, full), Note: note(rec), id: rec.TaskID}
	if !record.Final(rec.State) {
		out.Note = fmt.Sprintf("canceling: the worker has not stopped it yet (get_run follows it): %s", out.Note)
	}
	return out, nil
}

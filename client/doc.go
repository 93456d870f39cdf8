// Package client is toolgate's Go SDK: an agent submits its tool calls
// through it and waits for a human's (or the policy's) answer, approvers
// decide, and agents that run their own tools report what happened.
//
// It speaks toolgate's NATS request API (the micro service "toolgate",
// subjects toolgate.<endpoint>) and waits by listening on the call's own
// subject, toolgate.entry.<caller>.<pendingId>, and reading the entry again
// when the connection comes back: nothing lost across restarts. Connect
// with a credential toolgate issued (Credentials gives the options): the
// caller of the calls is its name. An agent that
// restarts while a call is pending calls Await again with the same
// pendingId (or Submit again with the same toolCallId, which returns the
// entry already there) and gets the answer, whether it came before or
// after the restart.
//
// # Answers
//
// Await returns when the call reaches a state the agent acts on:
//
//   - Approved: a human approved it. Run the tool with Outcome.Arguments,
//     which are the approver's when they edited them (Outcome.Edited).
//   - Scheduled: nobody had to approve it (a rule, a session grant, a
//     read-only tool, a policy that does not ask) and its scheduled time
//     has come. Run it with Outcome.Arguments.
//   - Executed: it has already run (an executor ran it, or this agent before
//     a restart); Outcome.Result and Outcome.Cost say how it went.
//
// Everything else comes back as an error, never as an Outcome that could be
// mistaken for a result:
//
//   - a *RejectedError (errors.Is(err, ErrRejected)) when a human rejected
//     the call, nobody answered in time, it was cancelled, or the policy
//     denied it; its Kind says which, By and Reason who and why, Rule the
//     policy rule that denied it. The Outcome returned with it is the zero
//     Outcome, whose Kind is empty. Tell the model the call was refused
//     and why; do not feed it anything that looks like the tool's output.
//   - an *ExecutionError when the tool ran and failed. The Outcome returned
//     with it has Kind Failed and the cost; it is not a rejection.
//   - refusals from toolgate (a decision on a call someone else decided,
//     a decider who is not an approver) match the machine package's
//     errors: errors.Is(err, machine.ErrConflict), machine.ErrForbidden,
//     machine.ErrNotFound, machine.ErrInvalid.
//
// # Running a call yourself
//
// An agent that runs its own tools calls Started before it runs one:
// Started claims the call by compare-and-set, so an executor hosting the
// same tool cannot also run it, and a Started that fails with
// machine.ErrConflict means someone else has it. Then Succeed or Fail.
//
//	out, err := c.Request(ctx, machine.Call{ToolName: "Bash", Arguments: args,
//		CallerBotID: "bot-1", ConversationID: conv})
//	var rej *client.RejectedError
//	switch {
//	case errors.As(err, &rej):
//		return refusal(rej.Kind, rej.Reason) // tell the model it was refused
//	case err != nil:
//		return err
//	case out.Kind == client.Executed:
//		return out.Result, nil // it already ran
//	}
//	if _, err := c.Started(ctx, out.PendingID, "bot-1"); err != nil {
//		return err
//	}
//	result, cost, runErr := run(out.Arguments)
//	...then c.Succeed or c.Fail
//
// Calls that executors run are awaited with UntilFinished, which waits past
// the approval for the result.
package client

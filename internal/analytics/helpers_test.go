package analytics_test

import (
	"context"
	"time"

	"github.com/toolgate/toolgate/machine"
)

// evaluator answers by tool: the tools of a scripted run.
var evaluator = machine.EvaluatorFunc(func(_ context.Context, c machine.Call) (machine.Verdict, error) {
	switch c.ToolName {
	case "read_file":
		return machine.Verdict{Action: machine.ActionRun, Reason: "readOnlyTools"}, nil
	case "rm_rf":
		return machine.Verdict{Action: machine.ActionDeny, Reason: "deny rm_rf"}, nil
	case "send_email":
		return machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: 5 * time.Minute, AutoRejectOnTimeout: false, Reason: "ask"}, nil
	}
	return machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: 5 * time.Minute, AutoRejectOnTimeout: true, Reason: "ask"}, nil
})

package metrics_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

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

// samples renders every series of a metric family as `name{k="v",…} value`
// lines, sorted; a histogram gives its _count and _sum.
func samples(t *testing.T, g prometheus.Gatherer, name string) []string {
	t.Helper()
	return sampleLines(t, g, name, false)
}

// counted is samples less the series still at 0 (a histogram's with no
// observation): those every Metrics starts with, which nothing counted.
func counted(t *testing.T, g prometheus.Gatherer, name string) []string {
	t.Helper()
	return sampleLines(t, g, name, true)
}

func sampleLines(t *testing.T, g prometheus.Gatherer, name string, skipZero bool) []string {
	t.Helper()
	mfs, err := g.Gather()
	require.NoError(t, err)
	var lines []string
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			sort.Strings(labels)
			ls := "{" + strings.Join(labels, ",") + "}"
			if skipZero && m.GetCounter().GetValue() == 0 && m.GetGauge().GetValue() == 0 && m.GetHistogram().GetSampleCount() == 0 {
				continue
			}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				lines = append(lines, fmt.Sprintf("%s%s %g", name, ls, m.GetCounter().GetValue()))
			case dto.MetricType_GAUGE:
				lines = append(lines, fmt.Sprintf("%s%s %g", name, ls, m.GetGauge().GetValue()))
			case dto.MetricType_HISTOGRAM:
				lines = append(lines,
					fmt.Sprintf("%s_count%s %d", name, ls, m.GetHistogram().GetSampleCount()),
					fmt.Sprintf("%s_sum%s %g", name, ls, m.GetHistogram().GetSampleSum()))
			}
		}
	}
	slices.Sort(lines)
	return lines
}

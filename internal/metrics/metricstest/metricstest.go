// Package metricstest holds what the tests of package metrics and of its
// exporter share: a registry's series as sorted text lines (Samples,
// Counted) and a policy engine to bind the labels to (Vocabulary).
package metricstest

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/policy"
)

// Vocabulary is a policy engine over doc, the vocabulary of the labels
// (metrics.Metrics.BoundLabels).
func Vocabulary(t testing.TB, doc string) *policy.Engine {
	t.Helper()
	d, err := policy.Parse([]byte(doc))
	require.NoError(t, err)
	e, err := policy.NewEngine(d, nil, nil)
	require.NoError(t, err)
	return e
}

// Samples renders every series of a metric family as `name{k="v",…} value`
// lines, sorted; a histogram gives its _count and _sum.
func Samples(t testing.TB, g prometheus.Gatherer, name string) []string {
	t.Helper()
	return sampleLines(t, g, name, false)
}

// Counted is Samples less the series still at 0 (a histogram's with no
// observation): those every Metrics starts with, which nothing counted.
func Counted(t testing.TB, g prometheus.Gatherer, name string) []string {
	t.Helper()
	return sampleLines(t, g, name, true)
}

func sampleLines(t testing.TB, g prometheus.Gatherer, name string, skipZero bool) []string {
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

package exporter

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/metrics"
)

const (
	dashboardFile = "../../../deploy/grafana/toolgate.json"
	metricsDir    = "../../../metrics"
)

// collectorFunc adapts functions to prometheus.Collector.
type collectorFunc struct {
	describe func(chan<- *prometheus.Desc)
	collect  func(chan<- prometheus.Metric)
}

func (c collectorFunc) Describe(ch chan<- *prometheus.Desc) { c.describe(ch) }
func (c collectorFunc) Collect(ch chan<- prometheus.Metric) { c.collect(ch) }

// exportedMetrics gathers one series of every metric toolgate exports
// (package metrics' collectors and this package's) and returns the names
// a query may use (histograms' _bucket, _count and _sum) with their label
// names.
func exportedMetrics(t *testing.T) map[string]map[string]bool {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	m.ToolCalls.WithLabelValues("t", "o").Inc()
	m.Transitions.WithLabelValues("f", "t").Inc()
	m.ApprovalResponse.WithLabelValues("t", "d").Observe(1)
	m.ApprovalTimeouts.WithLabelValues("t").Inc()
	m.Execution.WithLabelValues("t", "o").Observe(1)
	m.ExecutionAttempts.WithLabelValues("t").Inc()
	m.Cost.WithLabelValues("team", "t").Inc()
	m.Notification("c", "r")
	m.TransitionConflict("e")
	m.Requeues.WithLabelValues("r").Inc()
	m.ShadowComparison("allow", "ask")
	pending := NewPendingApprovals(m)
	pending.counts["team"] = &teamPending{team: "team", n: 1}
	reg.MustRegister(pending)
	reg.MustRegister(metrics.NewRunnableCalls(func() int { return 1 }))
	answers := metrics.NewReviewerAnswers()
	reg.MustRegister(answers.Collector())
	answers.ReviewerAnswer("r", metrics.ReviewerTimeout)
	reg.MustRegister(metrics.NewAnalyticsLag(func(context.Context) (uint64, error) { return 1, nil }, slog.New(slog.DiscardHandler)))
	reg.MustRegister(metrics.NewConsumerStalls(func() map[string]time.Duration { return map[string]time.Duration{"toolgate-relay": 0} }))
	lag := NewConsumerLag(nil, slog.New(slog.DiscardHandler))
	reg.MustRegister(collectorFunc{describe: lag.Describe, collect: func(ch chan<- prometheus.Metric) {
		for _, d := range []*prometheus.Desc{lag.pending, lag.ackPending, lag.redelivered} {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, 0, "s", "c")
		}
	}})
	mfs, err := reg.Gather()
	require.NoError(t, err)
	known := map[string]map[string]bool{}
	for _, mf := range mfs {
		labels := map[string]bool{}
		for _, l := range mf.GetMetric()[0].GetLabel() {
			labels[l.GetName()] = true
		}
		if mf.GetType() == dto.MetricType_HISTOGRAM {
			known[mf.GetName()+"_count"] = labels
			known[mf.GetName()+"_sum"] = labels
			bucket := map[string]bool{"le": true}
			for l := range labels {
				bucket[l] = true
			}
			known[mf.GetName()+"_bucket"] = bucket
			continue
		}
		known[mf.GetName()] = labels
	}
	var gathered []string
	for _, mf := range mfs {
		gathered = append(gathered, mf.GetName())
	}
	assert.ElementsMatch(t, namedMetrics(t), gathered, "every metric package metrics names is in the list, and only those")
	return known
}

// metricNameRE is a Name constant's declaration: NameToolCalls = "toolgate_…".
var metricNameRE = regexp.MustCompile(`(?m)^\s*(?:const\s+)?Name[A-Za-z]+\s*=\s*"(toolgate_[a-z_]+)"`)

// namedMetrics reads package metrics' source for the values of its Name
// constants: every metric toolgate exports.
func namedMetrics(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(metricsDir, "*.go"))
	require.NoError(t, err)
	var names []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range metricNameRE.FindAllStringSubmatch(string(src), -1) {
			names = append(names, m[1])
		}
	}
	require.Len(t, names, 20, "the Name constants of %s", metricsDir)
	return names
}

type dashboardPanel struct {
	ID         int              `json:"id"`
	Type       string           `json:"type"`
	Title      string           `json:"title"`
	GridPos    map[string]int   `json:"gridPos"`
	Datasource map[string]any   `json:"datasource"`
	Panels     []dashboardPanel `json:"panels"`
	Targets    []struct {
		RefID        string `json:"refId"`
		Expr         string `json:"expr"`
		LegendFormat string `json:"legendFormat"`
	} `json:"targets"`
}

var (
	metricRE   = regexp.MustCompile(`\btoolgate_[a-zA-Z0-9_]+`)
	selectorRE = regexp.MustCompile(`(toolgate_[a-zA-Z0-9_]+)\{([^}]*)\}`)
	matcherRE  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)`)
	groupingRE = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	legendRE   = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)
)

// TestDashboard_QueriesNameOnlyExportedMetrics reads the Grafana dashboard
// and checks that every panel queries metrics toolgate exports, with
// labels they have.
func TestDashboard_QueriesNameOnlyExportedMetrics(t *testing.T) {
	data, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	var dash struct {
		UID           string           `json:"uid"`
		Title         string           `json:"title"`
		SchemaVersion int              `json:"schemaVersion"`
		Panels        []dashboardPanel `json:"panels"`
		Templating    struct {
			List []struct {
				Name, Type, Query string
			} `json:"list"`
		} `json:"templating"`
	}
	require.NoError(t, json.Unmarshal(data, &dash), "valid JSON")
	assert.Equal(t, "toolgate", dash.UID)
	assert.NotEmpty(t, dash.Title)
	assert.Positive(t, dash.SchemaVersion)
	require.NotEmpty(t, dash.Templating.List)
	assert.Equal(t, "datasource", dash.Templating.List[0].Name)
	assert.Equal(t, "prometheus", dash.Templating.List[0].Query)

	known := exportedMetrics(t)
	used := map[string]bool{}
	ids := map[int]bool{}
	var walk func([]dashboardPanel)
	walk = func(panels []dashboardPanel) {
		for _, p := range panels {
			assert.False(t, ids[p.ID], "panel id %d is unique", p.ID)
			ids[p.ID] = true
			for _, k := range []string{"h", "w", "x", "y"} {
				assert.Contains(t, p.GridPos, k, "panel %q gridPos", p.Title)
			}
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			assert.Equal(t, "${datasource}", p.Datasource["uid"], "panel %q uses the datasource variable", p.Title)
			require.NotEmpty(t, p.Targets, "panel %q has queries", p.Title)
			for _, tg := range p.Targets {
				what := p.Title + " " + tg.RefID
				names := metricRE.FindAllString(tg.Expr, -1)
				require.NotEmpty(t, names, "%s queries a toolgate metric: %s", what, tg.Expr)
				labels := map[string]bool{}
				for _, n := range names {
					l, ok := known[n]
					if assert.True(t, ok, "%s: %s is not a metric toolgate exports", what, n) {
						used[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_count"), "_sum")] = true
						for k := range l {
							labels[k] = true
						}
					}
				}
				for _, sel := range selectorRE.FindAllStringSubmatch(tg.Expr, -1) {
					for _, m := range matcherRE.FindAllStringSubmatch(sel[2], -1) {
						assert.True(t, known[sel[1]][m[1]], "%s: %s has no label %q", what, sel[1], m[1])
					}
				}
				for _, g := range groupingRE.FindAllStringSubmatch(tg.Expr, -1) {
					for _, l := range strings.Split(g[1], ",") {
						if l = strings.TrimSpace(l); l != "" {
							assert.True(t, labels[l], "%s: grouping by %q, a label none of %v has", what, l, names)
						}
					}
				}
				for _, m := range legendRE.FindAllStringSubmatch(tg.LegendFormat, -1) {
					assert.True(t, labels[m[1]], "%s: legend names label %q", what, m[1])
				}
				assert.Equal(t, strings.Count(tg.Expr, "("), strings.Count(tg.Expr, ")"), "%s: balanced parentheses", what)
			}
		}
	}
	walk(dash.Panels)
	for _, want := range []string{metrics.NamePendingApprovals, metrics.NameApprovalResponse, metrics.NameApprovalTimeouts, metrics.NameToolCalls, metrics.NameCost, metrics.NameExecution} {
		assert.True(t, used[want], "the dashboard shows %s", want)
	}
}

package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolgate/toolgate/wire"
)

// The names of the shadow policy's metrics.
const (
	NameShadowCompared    = "toolgate_policy_shadow_compared_total"
	NameShadowDifferences = "toolgate_policy_shadow_differences_total"
)

func newShadow() (prometheus.Counter, *prometheus.CounterVec) {
	return prometheus.NewCounter(prometheus.CounterOpts{
			Name: NameShadowCompared,
			Help: "Submits this process evaluated against the shadow policy as well as the policy in force. Per process: sum across instances.",
		}), prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameShadowDifferences,
			Help: `Submits the shadow policy gives another verdict than the policy in force, by change ("allow->ask": the policy in force allows, the shadow would ask). Per process: sum across instances.`,
		}, []string{"change"})
}

// ShadowChange is the change label of a call the policy in force gives
// from and the shadow policy to (wire's verdicts: allow, ask, deny).
func ShadowChange(from, to string) string { return from + "->" + to }

// ShadowChanges are every value of the change label: each pair of
// different verdicts.
func ShadowChanges() []string {
	verdicts := []string{wire.VerdictAllow, wire.VerdictAsk, wire.VerdictDeny}
	var out []string
	for _, from := range verdicts {
		for _, to := range verdicts {
			if from != to {
				out = append(out, ShadowChange(from, to))
			}
		}
	}
	return out
}

// ShadowComparison counts one submit compared against the shadow policy,
// and a difference when from and to differ.
func (m *Metrics) ShadowComparison(from, to string) {
	m.ShadowCompared.Inc()
	if from != to {
		m.ShadowDifferences.WithLabelValues(ShadowChange(from, to)).Inc()
	}
}

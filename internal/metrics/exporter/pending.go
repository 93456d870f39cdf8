package exporter

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolgate/toolgate/internal/bus/views"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/metrics"
)

// PendingApprovals is the toolgate_pending_approvals gauge: the calls
// waiting for a human, per team, across every replica. It is computed from
// the tool_calls bucket, not from one process's counters, so that every
// replica reports the same number and a restart loses nothing. A KV watch
// of every key keeps it up to date as entries are written (the process's
// CallsFeed: View); a scrape only reads what the watch has gathered.
//
// Its team label is, like the counters', a team the policy names or
// metrics.OtherLabel (Metrics.TeamLabel), chosen when scraped: a policy
// change regroups the teams at the next scrape.
type PendingApprovals struct {
	desc    *prometheus.Desc
	metrics *metrics.Metrics // whose team labels it takes

	mu sync.Mutex
	pendingCounts
	shown  map[string]bool // labels once reported, which stay, at 0
	synced chan struct{}   // closed once the watch has read every key
	once   sync.Once
}

var _ prometheus.Collector = (*PendingApprovals)(nil)

// NewPendingApprovals returns the gauge, its team labels m's; a CallsFeed
// of the tool_calls bucket feeds it (View).
func NewPendingApprovals(m *metrics.Metrics) *PendingApprovals {
	return &PendingApprovals{
		metrics: m,
		desc: prometheus.NewDesc(metrics.NamePendingApprovals,
			"Calls waiting for a human's decision (PENDING_APPROVAL), by team, read from the store: every replica reports the fleet's number.",
			[]string{"team"}, nil),
		pendingCounts: *newPendingCounts(),
		shown:         map[string]bool{},
		synced:        make(chan struct{}),
	}
}

// Synced is closed once the gauge reflects every entry stored when Run
// started.
func (p *PendingApprovals) Synced() <-chan struct{} { return p.synced }

// View is the gauge as a view of a CallsFeed: each life of the feed
// counts the bucket afresh, aside, and the count replaces the gauge's
// once the bucket is read, correcting whatever the last life missed.
func (p *PendingApprovals) View() views.CallsView {
	return views.CallsView{Start: func() (func(views.CallRevision), func()) {
		loading := newPendingCounts()
		apply := func(r views.CallRevision) {
			if loading != nil {
				loading.update(r)
				return
			}
			p.mu.Lock()
			p.pendingCounts.update(r)
			p.mu.Unlock()
		}
		loaded := func() {
			p.mu.Lock()
			p.pendingCounts = *loading
			p.mu.Unlock()
			loading = nil
			p.once.Do(func() { close(p.synced) })
		}
		return apply, loaded
	}}
}

// pendingCounts are the calls pending approval, by key and by team: a
// key holds its team's count, which holds the team's name, so that a
// million calls pending for a few teams hold a few names.
type pendingCounts struct {
	byKey  map[string]*teamPending // pendingId → its team's, for entries pending approval
	counts map[string]*teamPending // team → its, for teams with any
}

// teamPending is how many calls of a team are pending.
type teamPending struct {
	team string
	n    int
}

func newPendingCounts() *pendingCounts {
	return &pendingCounts{byKey: map[string]*teamPending{}, counts: map[string]*teamPending{}}
}

func (c *pendingCounts) update(r views.CallRevision) {
	pending := !r.Removed && r.Head != nil && r.Head.Status == machine.StatePendingApproval
	if tp, ok := c.byKey[r.Key]; ok {
		delete(c.byKey, r.Key)
		// A team with none pending is forgotten: teams are the agents'
		// to name, and would otherwise pile up here.
		if tp.n--; tp.n <= 0 {
			delete(c.counts, tp.team)
		}
	}
	if pending {
		tp := c.counts[r.Head.Team]
		if tp == nil {
			tp = &teamPending{team: r.Head.Team}
			c.counts[tp.team] = tp
		}
		tp.n++
		c.byKey[r.Key] = tp
	}
}

// Pending returns the number of pending calls of a team.
func (p *PendingApprovals) Pending(team string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if tp := p.counts[team]; tp != nil {
		return tp.n
	}
	return 0
}

// Describe implements prometheus.Collector.
func (p *PendingApprovals) Describe(ch chan<- *prometheus.Desc) { ch <- p.desc }

// Collect implements prometheus.Collector.
func (p *PendingApprovals) Collect(ch chan<- prometheus.Metric) {
	p.mu.Lock()
	defer p.mu.Unlock()
	byLabel := map[string]int{}
	for team, tp := range p.counts {
		byLabel[p.metrics.TeamLabel(team)] += tp.n
	}
	for label := range byLabel {
		p.shown[label] = true
	}
	// Calls with no team, and the teams the policy names, are shown at 0
	// from the start: a panel shows 0, not "No data".
	p.shown[""] = true
	for _, team := range p.metrics.NamedTeams() {
		p.shown[team] = true
	}
	for label := range p.shown {
		ch <- prometheus.MustNewConstMetric(p.desc, prometheus.GaugeValue, float64(byLabel[label]), label)
	}
}

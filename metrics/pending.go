package metrics

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolgate/toolgate/machine"
)

// PendingApprovals is the toolgate_pending_approvals gauge: the calls
// waiting for a human, per team, across every replica. It is computed from
// the tool_calls bucket, not from one process's counters, so that every
// replica reports the same number and a restart loses nothing. A KV watch
// of every key keeps it up to date as entries are written; a scrape only
// reads what the watch has gathered.
//
// Its team label is, like the counters', a team the policy names or
// OtherLabel, chosen when scraped: a policy change regroups the teams at
// the next scrape.
type PendingApprovals struct {
	kv     jetstream.KeyValue
	desc   *prometheus.Desc
	labels *labels // the Metrics' (NewExporter); nil: every team is other

	mu     sync.Mutex
	byKey  map[string]string // pendingId → team, for entries pending approval
	counts map[string]int    // team → pending, for teams with any
	shown  map[string]bool   // labels once reported, which stay, at 0
	synced chan struct{}     // closed once the watch has read every key
	once   sync.Once         // Run may start again after a failure
}

var _ prometheus.Collector = (*PendingApprovals)(nil)

// NewPendingApprovals returns the gauge over the tool_calls bucket; Run
// feeds it.
func NewPendingApprovals(calls jetstream.KeyValue) *PendingApprovals {
	return &PendingApprovals{
		kv: calls,
		desc: prometheus.NewDesc(NamePendingApprovals,
			"Calls waiting for a human's decision (PENDING_APPROVAL), by team, read from the store: every replica reports the fleet's number.",
			[]string{"team"}, nil),
		byKey:  map[string]string{},
		counts: map[string]int{},
		shown:  map[string]bool{},
		synced: make(chan struct{}),
	}
}

// Synced is closed once the gauge reflects every entry stored when Run
// started.
func (p *PendingApprovals) Synced() <-chan struct{} { return p.synced }

// pendingFields is all the gauge reads of an entry.
type pendingFields struct {
	Status machine.State `json:"status"`
	Team   string        `json:"team"`
}

// Run watches the bucket until ctx ends, or until the watch fails. Run
// again, it reads every key again, which corrects what it missed.
func (p *PendingApprovals) Run(ctx context.Context) error {
	w, err := p.kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("pending approvals: watch %s: %w", p.kv.Bucket(), err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case kve, ok := <-w.Updates():
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("pending approvals: watch of %s stopped", p.kv.Bucket())
			}
			if kve == nil {
				p.once.Do(func() { close(p.synced) })
				continue
			}
			p.update(kve)
		}
	}
}

func (p *PendingApprovals) update(kve jetstream.KeyValueEntry) {
	var f pendingFields
	pending := kve.Operation() == jetstream.KeyValuePut &&
		json.Unmarshal(kve.Value(), &f) == nil && f.Status == machine.StatePendingApproval
	p.mu.Lock()
	defer p.mu.Unlock()
	if team, ok := p.byKey[kve.Key()]; ok {
		delete(p.byKey, kve.Key())
		// A team with none pending is forgotten: teams are the agents'
		// to name, and would otherwise pile up here.
		if p.counts[team]--; p.counts[team] <= 0 {
			delete(p.counts, team)
		}
	}
	if pending {
		p.byKey[kve.Key()] = f.Team
		p.counts[f.Team]++
	}
}

// Pending returns the number of pending calls of a team.
func (p *PendingApprovals) Pending(team string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts[team]
}

// Describe implements prometheus.Collector.
func (p *PendingApprovals) Describe(ch chan<- *prometheus.Desc) { ch <- p.desc }

// Collect implements prometheus.Collector.
func (p *PendingApprovals) Collect(ch chan<- prometheus.Metric) {
	l := p.labels
	if l == nil {
		l = &labels{}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	byLabel := map[string]int{}
	for team, n := range p.counts {
		byLabel[l.team(team)] += n
	}
	for label := range byLabel {
		p.shown[label] = true
	}
	// Calls with no team, and the teams the policy names, are shown at 0
	// from the start: a panel shows 0, not "No data".
	p.shown[""] = true
	for _, team := range l.teams() {
		p.shown[team] = true
	}
	for label := range p.shown {
		ch <- prometheus.MustNewConstMetric(p.desc, prometheus.GaugeValue, float64(byLabel[label]), label)
	}
}

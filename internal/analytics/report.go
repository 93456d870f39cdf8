package analytics

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// Resolutions of a Series.
const (
	ResolutionHour   = wire.AnalyticsByHour
	ResolutionMinute = wire.AnalyticsByMinute
)

// ReportOptions choose the time series of a Report.
type ReportOptions struct {
	Hours      int       // window, ending at Until (default wire.DefaultAnalyticsHours)
	Resolution string    // ResolutionHour (default) or ResolutionMinute
	Until      time.Time // end of the window (default now)
}

func (o *ReportOptions) normalize(now time.Time) error {
	if o.Hours == 0 {
		o.Hours = wire.DefaultAnalyticsHours
	}
	if o.Resolution == "" {
		o.Resolution = ResolutionHour
	}
	if o.Until.IsZero() {
		o.Until = now
	}
	switch o.Resolution {
	case ResolutionHour:
		if o.Hours < 1 || o.Hours > wire.MaxAnalyticsHours {
			return fmt.Errorf("hours: must be 1 to %d, got %d", wire.MaxAnalyticsHours, o.Hours)
		}
	case ResolutionMinute:
		if o.Hours < 1 || o.Hours > wire.MaxAnalyticsMinuteHours {
			return fmt.Errorf("hours: must be 1 to %d at minute resolution, got %d", wire.MaxAnalyticsMinuteHours, o.Hours)
		}
	default:
		return fmt.Errorf("resolution: must be %s or %s, got %q", ResolutionHour, ResolutionMinute, o.Resolution)
	}
	return nil
}

// ErrBadOptions wraps what is wrong with ReportOptions.
var ErrBadOptions = errors.New("bad report options")

// Report reads the aggregates of the generation in force.
func (a *Analytics) Report(ctx context.Context, opts ReportOptions) (*wire.AnalyticsReport, error) {
	now := a.now()
	if err := opts.normalize(now); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadOptions, err)
	}
	gen, _, err := a.generation(ctx)
	if err != nil {
		return nil, err
	}
	r := &wire.AnalyticsReport{GeneratedAt: now.UnixMilli(), Generation: gen,
		Tools: []wire.ToolReport{}, Teams: []wire.ToolReport{}, Approvers: []wire.ApproverReport{}}
	if r.Lag, err = a.lag(ctx, gen); err != nil {
		return nil, err
	}

	tools, teams, approvers, err := a.readAggregates(ctx, gen)
	if err != nil {
		return nil, err
	}
	var totals Stats
	waited := map[string][2]int64{} // per tool, its timed-out calls' shortest and longest timeouts
	for _, t := range tools {
		totals.merge(&t.Stats)
		r.Tools = append(r.Tools, t.report())
		waited[t.Name] = [2]int64{t.TimedOutMinMs, t.TimedOutMaxMs}
	}
	for _, t := range teams {
		r.Teams = append(r.Teams, t.report())
	}
	for _, ap := range approvers {
		r.Approvers = append(r.Approvers, ap.report())
	}
	r.Totals = totals.report()
	r.Totals.Name = "total"
	r.Recommendations = recommend(r, waited)
	if r.Series, err = a.series(ctx, gen, opts); err != nil {
		return nil, err
	}
	return r, nil
}

// readAggregates reads every tool's, team's and approver's aggregate of
// gen (a watch's initial values: one request, however many keys), sorted
// by name.
func (a *Analytics) readAggregates(ctx context.Context, gen uint64) ([]*toolStats, []*Stats, []*ApproverStats, error) {
	p := genPrefix(gen)
	var (
		tools     []*toolStats
		teams     []*Stats
		approvers []*ApproverStats
	)
	err := a.store.Values(ctx, []string{p + "tool.*", p + "team.*", p + "approver.*"}, func(key string, value []byte) error {
		var v any
		switch kind, _, _ := strings.Cut(strings.TrimPrefix(key, p), "."); kind {
		case "tool":
			t := &toolStats{}
			tools, v = append(tools, t), t
		case "team":
			t := &Stats{}
			teams, v = append(teams, t), t
		case "approver":
			ap := &ApproverStats{}
			approvers, v = append(approvers, ap), ap
		default:
			return nil
		}
		if err := json.Unmarshal(value, v); err != nil {
			return fmt.Errorf("aggregate %s is not readable: %w", key, err)
		}
		return nil
	})
	if err != nil {
		return nil, nil, nil, err
	}
	slices.SortFunc(tools, func(x, y *toolStats) int { return cmp.Compare(x.Name, y.Name) })
	slices.SortFunc(teams, func(x, y *Stats) int { return cmp.Compare(x.Name, y.Name) })
	slices.SortFunc(approvers, func(x, y *ApproverStats) int { return cmp.Compare(x.Name, y.Name) })
	return tools, teams, approvers, nil
}

// series reads the hours of the window.
func (a *Analytics) series(ctx context.Context, gen uint64, opts ReportOptions) (wire.AnalyticsSeries, error) {
	end := opts.Until.UTC().Truncate(time.Hour).Add(time.Hour)
	start := end.Add(-time.Duration(opts.Hours) * time.Hour)
	hours := make([]*HourStats, opts.Hours)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i := range hours {
		h := start.Add(time.Duration(i) * time.Hour)
		g.Go(func() error {
			key := hourKey(genPrefix(gen), h)
			value, _, err := a.store.Get(gctx, key)
			if errors.Is(err, machine.ErrNotFound) {
				hours[i] = &HourStats{Hour: h.UnixMilli()}
				return nil
			} else if err != nil {
				return err
			}
			hs := &HourStats{}
			if err := json.Unmarshal(value, hs); err != nil {
				return fmt.Errorf("aggregate %s is not readable: %w", key, err)
			}
			hours[i] = hs
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return wire.AnalyticsSeries{}, err
	}
	s := wire.AnalyticsSeries{Resolution: opts.Resolution, From: start.UnixMilli(), To: end.UnixMilli(), Points: []wire.SeriesPoint{}}
	for _, h := range hours {
		if opts.Resolution == ResolutionHour {
			p := h.Point.report(h.Hour)
			p.P50ResponseMs = math.Round(h.Response.Quantile(0.5))
			p.P90ResponseMs = math.Round(h.Response.Quantile(0.9))
			s.Points = append(s.Points, p)
			continue
		}
		for m := range 60 {
			var p Point
			if h.Minutes[m] != nil {
				p = *h.Minutes[m]
			}
			s.Points = append(s.Points, p.report(h.Hour+int64(m)*time.Minute.Milliseconds()))
		}
	}
	return s, nil
}

func (p *Point) report(t int64) wire.SeriesPoint {
	sp := wire.SeriesPoint{T: t, Calls: p.Calls, Asked: p.Asked, Decisions: p.Approved + p.Rejected,
		Approved: p.Approved, Rejected: p.Rejected, TimedOut: p.TimedOut}
	if sp.Decisions > 0 {
		sp.MeanResponseMs = math.Round(float64(p.ResponseSumMs) / float64(sp.Decisions))
	}
	return sp
}

func ratio(n, d int64) float64 {
	if d == 0 {
		return 0
	}
	return float64(n) / float64(d)
}

func (s *Stats) report() wire.ToolReport {
	decided := s.Approved + s.Rejected + s.TimedOut
	return wire.ToolReport{
		Name: s.Name, Calls: s.Calls, Asked: s.Asked, RanUnasked: s.RanUnasked, PolicyDenied: s.PolicyDenied,
		Approved: s.Approved, Rejected: s.Rejected, TimedOut: s.TimedOut, Overdue: s.Overdue,
		Cancelled: s.Cancelled, Attempts: s.Attempts, Succeeded: s.Succeeded, Failed: s.Failed,
		Decided:             decided,
		ApprovalRate:        ratio(s.Approved, decided),
		RejectionRate:       ratio(s.Rejected, decided),
		TimeoutRate:         ratio(s.TimedOut+s.Overdue, s.Asked),
		TimeToDecide:        s.Decide.Summary(),
		TopRejectionReasons: top(s.Reasons, 5),
		DecidedBy:           maps.Clone(s.DecidedBy),
		Cost:                s.Cost.Float64(),
		EstimatedCost:       s.EstimatedCost.Float64(),
		ApprovalTimeoutMs:   s.TimeoutMs,
		LastAskedAt:         s.LastAskedAt,
	}
}

func (t *toolStats) report() wire.ToolReport {
	r := t.Stats.report()
	r.Teams = top(t.Teams, maxTeamsKept+1)
	return r
}

func (a *ApproverStats) report() wire.ApproverReport {
	return wire.ApproverReport{
		Name: a.Name, Decisions: a.Approved + a.Rejected, Approved: a.Approved, Rejected: a.Rejected,
		ApprovalRate:      ratio(a.Approved, a.Approved+a.Rejected),
		ResponseTime:      a.Response.Summary(),
		MostRejectedTools: top(a.RejectedTools, 5),
		Reviews:           a.Reviews.report(),
	}
}

package gate

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/toolgate/toolgate/internal/bus/stores"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/wire"
)

// Budgets returns the budget ledger: what each team reserved and spent per
// day, beside the daily limit its policy sets now. With a team, only that
// team's days are read.
func (s *Service) Budgets(ctx context.Context, a Actor, r wire.BudgetsRequest) (wire.BudgetsReply, error) {
	if err := a.require("read budgets", wire.RoleViewer, wire.RoleApprover); err != nil {
		return wire.BudgetsReply{}, err
	}
	var days []stores.DayBudget
	var err error
	if r.Team != nil {
		days, err = s.budgets.ListTeam(ctx, *r.Team)
	} else {
		days, err = s.budgets.List(ctx)
	}
	if err != nil {
		return wire.BudgetsReply{}, fmt.Errorf("budgets: %w", err)
	}
	reply := wire.BudgetsReply{Items: make([]wire.Budget, 0, len(days))}
	for _, d := range days {
		b := wire.Budget{Team: d.Team, Day: d.Day, Reserved: d.Reserved.Float64(), Spent: d.Spent.Float64()}
		if s.limits != nil {
			b.Limit = s.limits.Resolve(d.Team, "").DailyCostLimit
		}
		reply.Items = append(reply.Items, b)
	}
	return reply, nil
}

// rateRules is what of the policy RateLimits lists: *policy.Engine has it.
type rateRules interface {
	RateRules() []policy.RateRule
}

// RateLimits returns the rate rules of the policy in force, each with its
// counters that hold a slot now: how many, and when the oldest is freed.
func (s *Service) RateLimits(ctx context.Context, a Actor, _ wire.RateLimitsRequest) (wire.RateLimitsReply, error) {
	if err := a.require("read rate limits", wire.RoleViewer, wire.RoleApprover); err != nil {
		return wire.RateLimitsReply{}, err
	}
	reply := wire.RateLimitsReply{Items: []wire.RateLimit{}}
	rr, ok := s.limits.(rateRules)
	if !ok {
		return reply, nil
	}
	now := s.now()
	for _, r := range rr.RateRules() {
		windows, err := s.rates.Windows(ctx, r.ID)
		if err != nil {
			return wire.RateLimitsReply{}, fmt.Errorf("rate limits: %w", err)
		}
		item := wire.RateLimit{Rule: r.String(), Source: r.Source, Index: r.Index, Match: r.Pattern.String(), Max: r.Max,
			Per: r.PerText, Scope: string(r.Scope), Then: string(r.Then), Counters: []wire.RateCount{}}
		for _, w := range windows {
			if n, freed := w.Live(now, r.Per); n > 0 {
				item.Counters = append(item.Counters, wire.RateCount{Value: w.Value, Count: n, FreesAt: freed.UnixMilli()})
			}
		}
		slices.SortFunc(item.Counters, func(a, b wire.RateCount) int {
			return cmp.Or(b.Count-a.Count, strings.Compare(a.Value, b.Value))
		})
		reply.Items = append(reply.Items, item)
	}
	return reply, nil
}

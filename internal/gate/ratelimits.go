package gate

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/toolgate/toolgate/internal/policy"
	"github.com/toolgate/toolgate/wire"
)

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

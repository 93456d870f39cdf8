package gate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/wire"
)

// maxMatched bounds how many calls one DecideMatching decides, so that
// its answer fits one message; what is left is matched by the next.
const maxMatched = 500

// DecideMatching approves or rejects every call pending approval that
// r.Match covers at this moment. Each is decided as Decide decides one:
// its own compare-and-set transition, event and history line, with the
// same checks, so a call someone else decided, cancelled or timed out
// meanwhile is skipped, never decided twice. The answer accounts for
// every call matched, decided or skipped and why.
func (s *Service) DecideMatching(ctx context.Context, a Actor, r wire.DecideMatchingRequest) (*wire.DecideMatchingReply, error) {
	if err := a.require("decide calls", wire.RoleApprover); err != nil {
		return nil, err
	}
	by, err := a.as(r.By)
	if err != nil {
		return nil, err
	}
	if r.Match == "" {
		return nil, fmt.Errorf("%w: match: required (a tool name or a rule such as \"Bash(git push *)\")", machine.ErrInvalid)
	}
	if _, err := policy.Covers(r.Match, machine.Call{}); err != nil {
		return nil, fmt.Errorf("%w: match: %v", machine.ErrInvalid, err)
	}
	var all []*machine.Entry
	if r.ConversationID != "" {
		all, err = s.calls.ListConversation(ctx, r.ConversationID)
	} else {
		all, err = s.calls.ListAll(ctx)
	}
	if err != nil {
		return nil, err
	}
	var matched []*machine.Entry
	for _, e := range all {
		if e.Status != machine.StatePendingApproval ||
			r.Team != "" && e.Team != r.Team ||
			r.CallerBotID != "" && e.CallerBotID != r.CallerBotID {
			continue
		}
		if ok, _ := policy.Covers(r.Match, e.Call()); ok {
			matched = append(matched, e)
		}
	}
	slices.SortFunc(matched, func(x, y *machine.Entry) int {
		return cmp.Or(cmp.Compare(x.RequestedAt, y.RequestedAt), strings.Compare(x.PendingID, y.PendingID))
	})
	matched = matched[:min(len(matched), maxMatched)]

	reply := &wire.DecideMatchingReply{Decided: []wire.MatchedCall{}, Skipped: []wire.MatchedCall{}, DryRun: r.DryRun}
	if r.DryRun {
		for _, e := range matched {
			reply.Decided = append(reply.Decided, wire.MatchedCall{Entry: s.shown(a, e)})
		}
		return reply, nil
	}
	results := make([]wire.MatchedCall, len(matched))
	decided := make([]bool, len(matched))
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i, e := range matched {
		g.Go(func() error {
			got, err := s.Decide(gctx, a, e.PendingID, machine.Decision{Approve: r.Approved, By: by, Reason: r.Reason})
			mu.Lock()
			defer mu.Unlock()
			switch status, code := wire.ErrorStatus(err); {
			case err == nil:
				results[i], decided[i] = wire.MatchedCall{Entry: got}, true
			case status == 500:
				return err // not a refusal: the rest would fail alike
			default:
				now := e
				if te := (*machine.TransitionError)(nil); errors.As(err, &te) {
					now = te.Entry
				}
				results[i] = wire.MatchedCall{Entry: s.shown(a, now), Code: code, Reason: err.Error()}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	for i, m := range results {
		if decided[i] {
			reply.Decided = append(reply.Decided, m)
		} else {
			reply.Skipped = append(reply.Skipped, m)
		}
	}
	return reply, nil
}

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
// r.Match covers at this moment, or the calls r.IDs names. Each is
// decided as Decide decides one: its own compare-and-set transition,
// event and history line, with the same checks, so a call someone else
// decided, cancelled or timed out meanwhile is skipped, never decided
// twice. A call under a quorum the decision does not settle gets a's
// vote, and stays pending. The answer accounts for every call matched or
// named: decided, voted on, or skipped and why.
func (s *Service) DecideMatching(ctx context.Context, a Actor, r wire.DecideMatchingRequest) (*wire.DecideMatchingReply, error) {
	if err := a.require("decide calls", wire.RoleApprover); err != nil {
		return nil, err
	}
	by, err := a.as(r.By)
	if err != nil {
		return nil, err
	}
	var matched, missing []*machine.Entry
	if len(r.IDs) > 0 || r.Match == "" {
		matched, missing, err = s.named(ctx, r)
	} else {
		matched, err = s.matching(ctx, r)
	}
	if err != nil {
		return nil, err
	}

	reply := &wire.DecideMatchingReply{Decided: []wire.MatchedCall{}, Voted: []wire.MatchedCall{}, Skipped: []wire.MatchedCall{}, DryRun: r.DryRun}
	for _, e := range missing {
		reply.Skipped = append(reply.Skipped, wire.MatchedCall{PendingID: e.PendingID, Code: "not_found",
			Reason: fmt.Sprintf("%s: no such call", e.PendingID)})
	}
	if r.DryRun {
		for _, e := range matched {
			m := wire.MatchedCall{PendingID: e.PendingID, Entry: s.shown(a, e)}
			switch {
			case e.Status == machine.StatePendingApproval && e.Settles(r.Approved):
				reply.Decided = append(reply.Decided, m)
				continue
			case e.Status == machine.StatePendingApproval:
				reply.Voted = append(reply.Voted, m)
				continue
			}
			// Named, and no longer pending: what deciding it would meet.
			m.Code, m.Reason = "conflict", fmt.Sprintf("%s is %s, not pending approval", e.PendingID, e.Status)
			reply.Skipped = append(reply.Skipped, m)
		}
		return reply, nil
	}
	results := make([]wire.MatchedCall, len(matched))
	outcome := make([]*[]wire.MatchedCall, len(matched)) // where each goes
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i, e := range matched {
		g.Go(func() error {
			got, err := s.decide(gctx, a, e.PendingID, machine.Decision{Approve: r.Approved, By: by, Reason: r.Reason})
			mu.Lock()
			defer mu.Unlock()
			switch status, code := wire.ErrorStatus(err); {
			case err == nil && got.Status == machine.StatePendingApproval:
				results[i], outcome[i] = wire.MatchedCall{PendingID: e.PendingID, Entry: got}, &reply.Voted
			case err == nil:
				results[i], outcome[i] = wire.MatchedCall{PendingID: e.PendingID, Entry: got}, &reply.Decided
			case status == 500:
				return err // not a refusal: the rest would fail alike
			default:
				now := e
				if te := (*machine.TransitionError)(nil); errors.As(err, &te) {
					now = te.Entry
				}
				results[i], outcome[i] = wire.MatchedCall{PendingID: e.PendingID, Entry: s.shown(a, now), Code: code, Reason: err.Error()}, &reply.Skipped
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	for i, m := range results {
		*outcome[i] = append(*outcome[i], m)
	}
	return reply, nil
}

// matching reads the calls pending approval that r.Match covers, as
// narrowed by r's other fields, oldest first and maxMatched at most.
func (s *Service) matching(ctx context.Context, r wire.DecideMatchingRequest) ([]*machine.Entry, error) {
	if _, err := policy.Covers(r.Match, machine.Call{}); err != nil {
		return nil, fmt.Errorf("%w: match: %v", machine.ErrInvalid, err)
	}
	var all []*machine.Entry
	var err error
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
	return matched[:min(len(matched), maxMatched)], nil
}

// named reads the calls r.IDs names, in the order named: those found,
// whatever their state (deciding one no longer pending is refused, and
// the answer says why), and those no call has, as entries holding only
// their id.
func (s *Service) named(ctx context.Context, r wire.DecideMatchingRequest) (found, missing []*machine.Entry, err error) {
	switch {
	case len(r.IDs) == 0:
		return nil, nil, fmt.Errorf("%w: match or ids: one is required (a tool name or a rule such as \"Bash(git push *)\", or the calls' pendingIds)", machine.ErrInvalid)
	case r.Match != "":
		return nil, nil, fmt.Errorf("%w: match and ids: give one, not both", machine.ErrInvalid)
	case r.ConversationID != "" || r.Team != "" || r.CallerBotID != "":
		return nil, nil, fmt.Errorf("%w: ids: names the calls to decide; conversationId, team and callerBotId narrow a match only", machine.ErrInvalid)
	case len(r.IDs) > maxMatched:
		return nil, nil, fmt.Errorf("%w: ids: at most %d, got %d", machine.ErrInvalid, maxMatched, len(r.IDs))
	}
	seen := map[string]int{}
	for i, id := range r.IDs {
		if id == "" {
			return nil, nil, fmt.Errorf("%w: ids[%d]: empty", machine.ErrInvalid, i)
		}
		if j, ok := seen[id]; ok {
			return nil, nil, fmt.Errorf("%w: ids[%d]: %q is ids[%d] again", machine.ErrInvalid, i, id, j)
		}
		seen[id] = i
	}
	entries := make([]*machine.Entry, len(r.IDs))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i, id := range r.IDs {
		g.Go(func() error {
			e, _, err := s.calls.Get(gctx, id)
			switch {
			case errors.Is(err, machine.ErrNotFound):
				entries[i] = &machine.Entry{PendingID: id, Status: ""}
			case err != nil:
				return fmt.Errorf("get %s: %w", id, err)
			default:
				entries[i] = e
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, nil, err
	}
	for _, e := range entries {
		if e.Status == "" {
			missing = append(missing, e)
		} else {
			found = append(found, e)
		}
	}
	return found, missing, nil
}

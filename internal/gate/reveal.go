package gate

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/toolgate/toolgate/internal/bus/stores"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// Reveal returns the arguments of one call as they are to whoever may
// read the call and holds a role the call's policy names in reveal:
// (admin where it names none), and records who was shown them, when and
// which revision, in TOOL_REVEALS, where the call's history shows it. The
// record is written before the arguments are answered: nobody is shown
// them unrecorded.
func (s *Service) Reveal(ctx context.Context, a Actor, r wire.RevealRequest) (*wire.RevealReply, error) {
	if err := required("pendingId", r.PendingID); err != nil {
		return nil, err
	}
	e, rev, err := s.read(ctx, a, r.PendingID)
	if err != nil {
		return nil, err
	}
	roles := s.maskerFor(e.Team, e.ConversationID).Reveal()
	if !a.system && !slices.ContainsFunc(roles, func(r string) bool { return a.Can(wire.Role(r)) }) {
		who := "no role: the policy's reveal is empty"
		if len(roles) > 0 {
			who = "the role " + strings.Join(roles, " or ") + " (the policy's reveal)"
		}
		return nil, fmt.Errorf("%w: %s (%s) may not reveal the arguments of %s: that needs %s", machine.ErrForbidden, a.Name, a.rolesString(), e.PendingID, who)
	}
	if s.reveals == nil {
		return nil, fmt.Errorf("reveal %s: no log to record it in", e.PendingID)
	}
	rec := wire.Reveal{PendingID: e.PendingID, By: a.Name, Roles: a.Roles, At: s.now().UnixMilli(), Revision: rev, State: e.Status}
	if err := s.reveals.Append(ctx, rec); err != nil {
		return nil, fmt.Errorf("reveal %s: recording it: %w", e.PendingID, err)
	}
	return &wire.RevealReply{PendingID: e.PendingID, ToolArguments: e.ToolArguments, OriginalArguments: e.OriginalArguments, Reveal: rec}, nil
}

// withReveals is a call's history with its reveals among its
// transitions, by time.
func (s *Service) withReveals(ctx context.Context, pendingID string, items []wire.HistoryItem) ([]wire.HistoryItem, error) {
	if s.reveals == nil {
		return items, nil
	}
	reveals, err := s.reveals.Of(ctx, pendingID)
	if err != nil || len(reveals) == 0 {
		return items, err
	}
	for _, r := range reveals {
		items = append(items, wire.HistoryItem{Revision: r.Revision, Transition: machine.Transition{
			Event: wire.HistoryRevealed, From: r.State, To: r.State, Actor: r.By, At: r.At, Reason: "shown the arguments in clear",
		}})
	}
	slices.SortStableFunc(items, func(x, y wire.HistoryItem) int { return cmp.Compare(x.At, y.At) })
	return items, nil
}

// newRevealLog is the log of reveals over cfg's stream, nil without one.
func newRevealLog(cfg Config) *stores.RevealLog {
	if cfg.Conn == nil || cfg.Buckets.Reveals == nil {
		return nil
	}
	return stores.NewRevealLog(cfg.Conn.JetStream(), cfg.Buckets.Reveals)
}

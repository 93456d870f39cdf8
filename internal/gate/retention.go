package gate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/toolgate/toolgate/internal/bus/stores"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// Retire moves a call that finished more than after ago out of tool_calls
// into the archive (TOOL_ARCHIVE), with its history and receipts: it is
// archived first, then purged from the bucket if it is still at the
// revision archived, so a retirer that dies between the two leaves a call
// archived and still in the bucket, which the next one retires again (the
// archive keeps one copy per call). A call not finished that long is
// refused with a conflict. The timer gives it at the end of a call's
// retention window.
func (t Timer) Retire(ctx context.Context, pendingID string, after time.Duration) error {
	s := t.s
	if s.archive == nil {
		return fmt.Errorf("retire %s: no archive", pendingID)
	}
	e, rev, err := s.calls.Get(ctx, pendingID)
	if err != nil {
		return fmt.Errorf("retire %s: %w", pendingID, err)
	}
	now := s.now()
	if !e.Status.Terminal() || e.LastTransition == nil || now.Sub(time.UnixMilli(e.LastTransition.At)) < after {
		return fmt.Errorf("retire %s: %w: it is %s, not finished %s ago", pendingID, machine.ErrConflict, e.Status, after)
	}
	// Its receipts are its history, signed; without them (no signer),
	// the bucket's revisions are read (a consumer of the bucket's stream:
	// one a call, which receipts spare).
	var history []wire.HistoryItem
	if len(e.Receipts) == 0 {
		if history, err = s.calls.History(ctx, pendingID); err != nil {
			return fmt.Errorf("retire %s: history: %w", pendingID, err)
		}
	}
	if err := s.archive.Put(ctx, wire.ArchivedCall{Entry: e, Revision: rev, History: history, ArchivedAt: now.UnixMilli()}); err != nil {
		return fmt.Errorf("retire %s: archive: %w", pendingID, err)
	}
	// The purge's marker outlives the relay's and the timer's reading of
	// it, and then goes too.
	return s.calls.Retire(ctx, pendingID, rev, retiredMarkerTTL)
}

// archivedHistory is the history of an archived call: the one archived
// with it, or the transitions its receipts record (revisions unknown: 0).
func archivedHistory(c *wire.ArchivedCall) []wire.HistoryItem {
	if c.History != nil {
		return c.History
	}
	items := []wire.HistoryItem{}
	for _, r := range c.Entry.Receipts {
		items = append(items, wire.HistoryItem{Transition: machine.Transition{
			Event: r.Event, From: r.From, To: r.To, Actor: r.Actor, Reason: r.Reason, At: r.At,
		}})
	}
	return items
}

// archiveCheckWait bounds a submit's look into the archive: an archive
// with a leader answers in milliseconds; one electing a leader holds a
// submit up no longer than this.
const archiveCheckWait = 500 * time.Millisecond

// retiredMarkerTTL is how long the marker of a call purged from
// tool_calls stays there.
const retiredMarkerTTL = time.Hour

// archived returns the archived call pendingID: machine.ErrNotFound when
// it is not in the archive either (or there is none).
func (s *Service) archived(ctx context.Context, pendingID string) (*wire.ArchivedCall, error) {
	if s.archive == nil {
		return nil, fmt.Errorf("pendingId %s: %w", pendingID, machine.ErrNotFound)
	}
	return s.archive.Get(ctx, pendingID)
}

// withArchived adds to entries, a conversation's in tool_calls, its calls
// the archive holds and the bucket no longer does.
func (s *Service) withArchived(ctx context.Context, conversationID string, entries []*machine.Entry) ([]*machine.Entry, error) {
	if s.archive == nil {
		return entries, nil
	}
	archived, err := s.archive.ListConversation(ctx, conversationID)
	if err != nil {
		return nil, err
	}
	return mergeArchived(entries, archived, func(*machine.Entry) bool { return true }), nil
}

// mergeArchived adds to live the archived calls keep accepts that live
// does not hold (a call retired while live was read may be in both).
func mergeArchived(live []*machine.Entry, archived []*wire.ArchivedCall, keep func(*machine.Entry) bool) []*machine.Entry {
	seen := make(map[string]bool, len(live))
	for _, e := range live {
		seen[e.PendingID] = true
	}
	for _, c := range archived {
		if !seen[c.Entry.PendingID] && keep(c.Entry) {
			seen[c.Entry.PendingID] = true
			live = append(live, c.Entry)
		}
	}
	return live
}

// isNotFound reports whether err says an entry is not in tool_calls.
func isNotFound(err error) bool { return errors.Is(err, machine.ErrNotFound) }

// newArchive is the archive of cfg's buckets, nil without the stream or a
// connection to publish to it.
func newArchive(cfg Config) *stores.Archive {
	if cfg.Conn == nil || cfg.Buckets.Archive == nil {
		return nil
	}
	return stores.NewArchive(cfg.Conn.JetStream(), cfg.Buckets.Archive)
}

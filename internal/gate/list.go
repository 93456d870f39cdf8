package gate

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/toolgate/toolgate/internal/bus/views"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// Page sizes: a page holds at most maxPageEntries entries and stops growing
// past maxPageBytes of JSON, so it fits in one NATS message (1 MiB by
// default) whatever the entries carry.
const (
	defaultPageEntries = 200
	maxPageEntries     = 1000
	maxPageBytes       = 512 << 10
)

// listPage filters entries by r, sorts them oldest first (then by id) and
// cuts the page r's cursor and limit ask for.
func listPage(entries []*machine.Entry, r wire.ListRequest) (wire.ListReply, error) {
	if r.Status != "" && !r.Status.Valid() {
		return wire.ListReply{}, fmt.Errorf("%w: status: unknown state %q", machine.ErrInvalid, r.Status)
	}
	limit := cmp.Or(r.Limit, defaultPageEntries)
	if limit < 1 || limit > maxPageEntries {
		return wire.ListReply{}, fmt.Errorf("%w: limit: must be 1 to %d, got %d", machine.ErrInvalid, maxPageEntries, r.Limit)
	}
	var after struct {
		at int64
		id string
	}
	if r.Cursor != "" {
		at, id, ok := strings.Cut(r.Cursor, "~")
		ms, err := strconv.ParseInt(at, 10, 64)
		if !ok || err != nil {
			return wire.ListReply{}, fmt.Errorf("%w: cursor: not one a list gave", machine.ErrInvalid)
		}
		after.at, after.id = ms, id
	}
	items := []*machine.Entry{}
	for _, e := range entries {
		if (r.ToolName == "" || e.ToolName == r.ToolName) &&
			(r.CallerBotID == "" || e.CallerBotID == r.CallerBotID) &&
			(r.ConversationID == "" || e.ConversationID == r.ConversationID) &&
			(r.Status == "" || e.Status == r.Status) &&
			(r.Cursor == "" || cmp.Or(cmp.Compare(e.RequestedAt, after.at), strings.Compare(e.PendingID, after.id)) > 0) {
			items = append(items, e)
		}
	}
	slices.SortFunc(items, func(a, b *machine.Entry) int {
		return cmp.Or(cmp.Compare(a.RequestedAt, b.RequestedAt), strings.Compare(a.PendingID, b.PendingID))
	})
	size := 0
	for i, e := range items {
		data, _ := json.Marshal(e)
		if size += len(data); i == limit || (i > 0 && size > maxPageBytes) {
			last := items[i-1]
			return wire.ListReply{Items: items[:i], NextCursor: fmt.Sprintf("%d~%s", last.RequestedAt, last.PendingID)}, nil
		}
	}
	return wire.ListReply{Items: items}, nil
}

// listIndexed is the page r asks for read from the index of tool_calls,
// and false when the index cannot answer (it is not following the
// bucket, or not caught up with it): then the bucket is read. The page is
// what listPage cuts from the whole bucket: the index selects the first
// limit+1 calls past the cursor that the filters take, in list order, and
// listPage cuts those as it would cut all of them. An open call's entry
// is the index's; a finished one's, read from the bucket (at most a page
// of them). A conversation's page also takes its retired calls from the
// archive, read after the index so that a call retired meanwhile is in
// one or the other (or both: it is listed once).
func (s *Service) listIndexed(ctx context.Context, a Actor, r wire.ListRequest) (wire.ListReply, bool, error) {
	if s.index == nil || !s.index.Synced() {
		return wire.ListReply{}, false, nil
	}
	if ok, err := s.index.Current(ctx); !ok || err != nil {
		return wire.ListReply{}, false, err
	}
	f := views.CallFilter{Status: r.Status, ToolName: r.ToolName, CallerBotID: r.CallerBotID, ConversationID: r.ConversationID}
	if r.Cursor != "" {
		at, id, _ := strings.Cut(r.Cursor, "~")
		f.After, f.AfterID = true, id
		f.AfterAt, _ = strconv.ParseInt(at, 10, 64) // listPage has checked it
	}
	calls, ok := s.index.Page(f, cmp.Or(r.Limit, defaultPageEntries)+1)
	if !ok {
		return wire.ListReply{}, false, nil
	}
	entries := make([]*machine.Entry, len(calls))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(pageReads)
	for i, c := range calls {
		if entries[i] = c.Entry; c.Entry != nil {
			continue
		}
		g.Go(func() error {
			e, _, err := s.calls.Get(gctx, c.PendingID)
			if isNotFound(err) {
				// Retired since the index was read: the archive has it.
				var ac *wire.ArchivedCall
				if ac, err = s.archived(gctx, c.PendingID); err == nil {
					e = ac.Entry
				}
			}
			entries[i] = e
			return err
		})
	}
	if err := g.Wait(); isNotFound(err) {
		return wire.ListReply{}, false, nil // gone altogether meanwhile: read the bucket
	} else if err != nil {
		return wire.ListReply{}, true, err
	}
	if r.ConversationID != "" {
		var err error
		if entries, err = s.withArchived(ctx, r.ConversationID, entries); err != nil {
			return wire.ListReply{}, true, err
		}
	}
	s.shownAll(a, entries)
	page, err := listPage(entries, r)
	return page, true, err
}

// pageReads is how many finished entries of a page are read at once.
const pageReads = 16

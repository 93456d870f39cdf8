package gate

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

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

package gate

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

func TestListPage_FitsOneMessageWhateverTheEntries(t *testing.T) {
	t.Parallel()
	var entries []*machine.Entry
	for i := range 50 {
		entries = append(entries, &machine.Entry{PendingID: fmt.Sprintf("c.%02d", i), RequestedAt: int64(i),
			ToolArguments: json.RawMessage(`{"blob":"` + strings.Repeat("x", 100<<10) + `"}`)})
	}
	var got []string
	r := wire.ListRequest{Limit: 1000}
	for pages := 0; ; pages++ {
		require.Less(t, pages, 50)
		page, err := listPage(entries, r)
		require.NoError(t, err)
		data, _ := json.Marshal(page)
		assert.Less(t, len(data), 1<<20, "a page fits in a NATS message")
		for _, e := range page.Items {
			got = append(got, e.PendingID)
		}
		if page.NextCursor == "" {
			break
		}
		r.Cursor = page.NextCursor
	}
	require.Len(t, got, 50, "every entry once")
	assert.IsNonDecreasing(t, got)
}

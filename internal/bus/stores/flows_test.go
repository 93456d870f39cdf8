package stores_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/bus/stores"
	"github.com/toolgate/toolgate/policy"
)

// TestFlowMarks_TheLatestCompletionStays: marks racing from several
// writers leave the latest completion; an earlier one arriving late
// does not replace it; whatever a caller named its conversation (dots,
// spaces, wildcards, 256 bytes) is a key of its own.
func TestFlowMarks_TheLatestCompletionStays(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	marks := []*stores.FlowMarks{stores.NewFlowMarks(env.JS, env.Buckets.Flows), stores.NewFlowMarks(env.JS, env.Buckets.Flows)}
	base := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	for _, conv := range []string{"c1", "a.b *>", strings.Repeat("x", 256)} {
		key := policy.FlowKey{Mark: "0123456789abcdef0123", Scope: policy.FlowByConversation, Value: conv}
		_, ok, err := marks[0].Last(ctx, key)
		require.NoError(t, err)
		require.False(t, ok, "nothing marked yet")
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				assert.NoError(t, marks[i%2].Mark(ctx, key, policy.FlowMark{ToolName: "read_inbox", PendingID: conv + ".t" + string(rune('0'+i)),
					At: base.Add(time.Duration(i) * time.Second)}))
			})
		}
		wg.Wait()
		require.NoError(t, marks[0].Mark(ctx, key, policy.FlowMark{ToolName: "read_inbox", PendingID: "late", At: base}))
		got, ok, err := marks[1].Last(ctx, key)
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, policy.FlowMark{ToolName: "read_inbox", PendingID: conv + ".t7", At: base.Add(7 * time.Second)}, got, "conversation %q", conv[:min(len(conv), 8)])
	}
}

package gate

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

var askAll = machine.EvaluatorFunc(func(context.Context, machine.Call) (machine.Verdict, error) {
	return machine.Verdict{Action: machine.ActionAsk, ApprovalTimeout: time.Hour, Reason: "ask"}, nil
})

// TestListIndexed_AgreesWithTheScan: for a random mix of entries (open
// and finished, requestedAt shared by several, some purged, some retired
// into the archive, a few large), filters (a conversation's among them),
// limits and cursors, a page from the index is the page the scan
// of the whole bucket cuts, for every kind of reader (masked or not), and
// so is every page of a listing followed cursor to cursor. The bucket
// changes between rounds; the index catches up before it answers.
func TestListIndexed_AgreesWithTheScan(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	s := New(Config{Conn: env.Conn, Buckets: env.Buckets})
	rng := rand.New(rand.NewPCG(1, 13))
	tools := []string{"deploy", "send_email", "wipe"}
	callers := []string{"bot-a", "bot-b", "bot-c"}
	var ids []string
	blob := ""
	write := func(n int) {
		for range n {
			i := len(ids)
			args := `{"password":"hunter2","n":` + fmt.Sprint(i) + `,"blob":"` + blob + `"}`
			e := &machine.Entry{
				PendingID:     machine.PendingID(fmt.Sprintf("conv-%d", rng.IntN(5)), fmt.Sprintf("call-%04d", i)),
				ToolName:      tools[rng.IntN(len(tools))],
				ToolArguments: json.RawMessage(args),
				CallerBotID:   callers[rng.IntN(len(callers))],
				RequestedAt:   int64(rng.IntN(50)), // many calls share a millisecond
				Status:        machine.States[rng.IntN(len(machine.States))],
			}
			e.ConversationID, _, _ = strings.Cut(e.PendingID, ".")
			_, err := env.Store.Create(ctx, e)
			require.NoError(t, err)
			ids = append(ids, e.PendingID)
		}
	}
	change := func(n int) {
		for range n {
			id := ids[rng.IntN(len(ids))]
			e, rev, err := env.Store.Get(ctx, id)
			if err != nil {
				continue // purged
			}
			switch rng.IntN(6) {
			case 0, 1:
				require.NoError(t, env.KV.Purge(ctx, id))
				continue
			case 2:
				// Finished long ago, and retired: its conversation's
				// list takes it from the archive.
				e.Status = machine.StateCompletedSuccess
				e.LastTransition = &machine.Transition{Event: machine.EventSucceed, From: machine.StateExecuting, To: e.Status, At: 1}
				_, err = env.Store.Update(ctx, e, rev)
				require.NoError(t, err)
				require.NoError(t, s.Timer().Retire(ctx, id, 0))
				continue
			}
			e.Status = machine.States[rng.IntN(len(machine.States))]
			_, err = env.Store.Update(ctx, e, rev)
			require.NoError(t, err)
		}
	}
	readers := []Actor{System, {Name: "vic", Roles: []wire.Role{wire.RoleViewer}}, {Name: "bot-b", Roles: []wire.Role{wire.RoleAgent}}}
	randomRequest := func() wire.ListRequest {
		var r wire.ListRequest
		if rng.IntN(2) == 0 {
			r.Status = machine.States[rng.IntN(len(machine.States))]
		}
		if rng.IntN(3) == 0 {
			r.ToolName = tools[rng.IntN(len(tools))]
		}
		if rng.IntN(3) == 0 {
			r.CallerBotID = callers[rng.IntN(len(callers))]
		}
		if rng.IntN(3) == 0 {
			// conv-5 has no calls; "conv 1" is no key token (its key
			// is its base64).
			r.ConversationID = []string{"conv-0", "conv-1", "conv-4", "conv-5", "conv 1"}[rng.IntN(5)]
		}
		if rng.IntN(4) > 0 {
			r.Limit = 1 + rng.IntN(25)
		}
		switch rng.IntN(3) {
		case 0:
			r.Cursor = fmt.Sprintf("%d~%s", rng.IntN(52)-1, ids[rng.IntN(len(ids))])
		case 1:
			r.Cursor = fmt.Sprintf("%d~", rng.IntN(52))
		}
		return r
	}
	compare := func(a Actor, r wire.ListRequest) (next string) {
		t.Helper()
		if !a.SeesAll() {
			r.CallerBotID = a.Name // as List does
		}
		want, err := s.listRead(ctx, a, r)
		require.NoError(t, err)
		got, ok, err := s.listIndexed(ctx, a, r)
		require.NoError(t, err)
		require.True(t, ok, "the index answers")
		wantJSON, _ := json.Marshal(want)
		gotJSON, _ := json.Marshal(got)
		require.JSONEq(t, string(wantJSON), string(gotJSON), "%s lists %+v", a.Name, r)
		return got.NextCursor
	}

	write(150)
	bustest.FollowCalls(t, s.index)
	for round := range 4 {
		write(40)
		change(40)
		for range 30 {
			compare(readers[rng.IntN(len(readers))], randomRequest())
		}
		// A whole listing, page after page.
		r := randomRequest()
		r.Cursor = ""
		a := readers[round%len(readers)]
		for pages := 0; ; pages++ {
			require.Less(t, pages, 1000)
			if r.Cursor = compare(a, r); r.Cursor == "" {
				break
			}
		}
	}
	// Large entries: a page stops at maxPageBytes, from the index as from
	// the scan.
	blob = strings.Repeat("x", 200<<10)
	write(4)
	assert.NotEmpty(t, compare(System, wire.ListRequest{Limit: maxPageEntries}), "cut short: a page fits in a message")
}

// TestList_ReadsItsOwnWrites: a caller that submits, or decides, and
// lists at once sees what it wrote, from the index, however many do so at
// the same time.
func TestList_ReadsItsOwnWrites(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	s := New(Config{Conn: env.Conn, Buckets: env.Buckets, Policy: askAll})
	bustest.FollowCalls(t, s.index)
	listed := func(a Actor, r wire.ListRequest, id string) bool {
		t.Helper()
		page, ok, err := s.listIndexed(ctx, a, r)
		require.NoError(t, err)
		require.True(t, ok, "the index answers")
		for _, e := range page.Items {
			if e.PendingID == id {
				return true
			}
		}
		return false
	}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			agent := Actor{Name: fmt.Sprintf("bot-%d", w), Roles: []wire.Role{wire.RoleAgent}}
			for i := range 15 {
				e, err := s.Submit(ctx, agent, machine.Call{ToolCallID: fmt.Sprintf("c%d", i), ToolName: "deploy", ConversationID: fmt.Sprintf("rw-%d", w)})
				if !assert.NoError(t, err) {
					return
				}
				assert.True(t, listed(agent, wire.ListRequest{Status: machine.StatePendingApproval, CallerBotID: agent.Name}, e.PendingID),
					"%s lists the call it just submitted", agent.Name)
				_, err = s.Decide(ctx, System, wire.DecideRequest{PendingID: e.PendingID, Approved: i%2 == 0, By: "alice"})
				if !assert.NoError(t, err) {
					return
				}
				assert.False(t, listed(System, wire.ListRequest{Status: machine.StatePendingApproval, CallerBotID: agent.Name}, e.PendingID),
					"a call just decided is no longer pending")
				status := machine.StateRejectedByUser
				if i%2 == 0 {
					status = machine.StateApproved
				}
				assert.True(t, listed(System, wire.ListRequest{Status: status, CallerBotID: agent.Name}, e.PendingID),
					"the decider lists the call as decided")
			}
		})
	}
	wg.Wait()
}

// TestList_FallsBackToTheScanUntilTheIndexIsSynced: a Service whose index
// does not follow the bucket lists as before, reading all of it, and an
// agent sees only its own calls either way.
func TestList_FallsBackToTheScanUntilTheIndexIsSynced(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	s := New(Config{Conn: env.Conn, Buckets: env.Buckets, Policy: askAll})
	mine := Actor{Name: "bot-mine", Roles: []wire.Role{wire.RoleAgent}}
	other := Actor{Name: "bot-other", Roles: []wire.Role{wire.RoleAgent}}
	for i := range 3 {
		for _, a := range []Actor{mine, other} {
			_, err := s.Submit(ctx, a, machine.Call{ToolCallID: fmt.Sprintf("c%d", i), ToolName: "deploy", ConversationID: "fallback-" + a.Name})
			require.NoError(t, err)
		}
	}
	_, ok, err := s.listIndexed(ctx, mine, wire.ListRequest{})
	require.NoError(t, err)
	require.False(t, ok, "not following the bucket: the index does not answer")
	check := func() {
		t.Helper()
		page, err := s.List(ctx, mine, wire.ListRequest{})
		require.NoError(t, err)
		require.Len(t, page.Items, 3)
		for _, e := range page.Items {
			assert.Equal(t, mine.Name, e.CallerBotID, "an agent lists only its own calls")
		}
		_, err = s.List(ctx, mine, wire.ListRequest{CallerBotID: other.Name})
		require.ErrorIs(t, err, machine.ErrForbidden)
	}
	check()
	bustest.FollowCalls(t, s.index)
	_, ok, err = s.listIndexed(ctx, mine, wire.ListRequest{})
	require.NoError(t, err)
	require.True(t, ok)
	check()
}

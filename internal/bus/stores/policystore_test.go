package stores_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/bus/stores"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/policy"
	"golang.org/x/sync/errgroup"
)

const policyYAML = `
default:
  requiresApprovalTools: [web_search]
  rules:
    allow: ["Bash(npm test:*)"]
teams:
  finance:
    requiresApprovalTools: all
    approvers: [alice, bob]
`

func TestPolicyStore_SetRefusesInvalidAndKeepsTheOld(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	s := stores.NewPolicyStore(env.JS, env.Buckets.Policies)

	doc, rev, err := s.Get(ctx)
	require.NoError(t, err)
	assert.Zero(t, rev)
	assert.Nil(t, doc.Default, "nothing stored: built-in defaults")

	good, err := policy.Parse([]byte(policyYAML))
	require.NoError(t, err)
	require.NoError(t, s.Set(ctx, good))

	bad := good.Clone()
	bad.Teams["finance"].ToolSpecificDelays = map[string]int64{"web_search": -5}
	err = s.Set(ctx, bad)
	require.ErrorIs(t, err, machine.ErrInvalid)
	assert.ErrorContains(t, err, `teams.finance.toolSpecificDelays["web_search"]`)

	stored, _, err := s.Get(ctx)
	require.NoError(t, err)
	assert.Equal(t, good, stored, "the refused document changed nothing")
}

func TestPolicyStore_LoadFileKeepsWhatTheStoredPolicyGrew(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	s := stores.NewPolicyStore(env.JS, env.Buckets.Policies)

	loaded, err := s.LoadFile(ctx, []byte(policyYAML))
	require.NoError(t, err)
	assert.True(t, loaded)
	require.NoError(t, s.AddAllowRule(ctx, "finance", "transfer_funds"))
	require.NoError(t, s.AddAllowRule(ctx, "finance", "transfer_funds"), "adding a rule twice keeps one")

	// A restart with the same file keeps the rule an approver added.
	loaded, err = s.LoadFile(ctx, []byte(policyYAML))
	require.NoError(t, err)
	assert.False(t, loaded)
	doc, _, err := s.Get(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"transfer_funds"}, doc.Teams["finance"].Rules.Allow)

	// An edited file is put in force.
	loaded, err = s.LoadFile(ctx, []byte(policyYAML+"    dailyCostLimit: 10\n"))
	require.NoError(t, err)
	assert.True(t, loaded)
	doc, _, err = s.Get(ctx)
	require.NoError(t, err)
	assert.Empty(t, doc.Teams["finance"].Rules.Allow)

	_, err = s.LoadFile(ctx, []byte("default: {approvalTimeoutMs: soon}"))
	assert.ErrorContains(t, err, "approvalTimeoutMs")
}

// TestPolicyStore_AnUpdateWhoseAnswerWasLostIsAskedAgain: an update whose
// answer does not come is sent again. One stored after all is no conflict
// with itself, and is stored once; one that was not, when another change
// came first, is made again on top of that one.
func TestPolicyStore_AnUpdateWhoseAnswerWasLostIsAskedAgain(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	s := stores.NewPolicyStore(env.JS, env.Buckets.Policies)
	allowed := func() []string {
		doc, _, err := s.Get(ctx)
		require.NoError(t, err)
		return doc.Teams["ops"].Rules.Allow
	}

	lossy := stores.NewPolicyStore(env.JS, &bustest.LostReplies{KeyValue: env.Buckets.Policies, Stored: true, Lost: 1})
	require.NoError(t, lossy.AddAllowRule(ctx, "ops", "read_logs"), "its own create is no conflict")
	hist, err := env.Buckets.Policies.History(ctx, "document")
	require.NoError(t, err)
	assert.Len(t, hist, 1, "stored once")

	other := func(ctx context.Context) error { return s.AddAllowRule(ctx, "ops", "deploy") }
	lossy = stores.NewPolicyStore(env.JS, &bustest.LostReplies{KeyValue: env.Buckets.Policies, Lost: 1, Before: other})
	require.NoError(t, lossy.AddAllowRule(ctx, "ops", "rollback"), "another's change came first: made again on it")
	assert.Equal(t, []string{"read_logs", "deploy", "rollback"}, allowed())
}

func TestPolicyStore_FollowChangesTheEngineLive(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	s := stores.NewPolicyStore(env.JS, env.Buckets.Policies)
	engine, err := policy.NewEngine(nil, nil, nil)
	require.NoError(t, err)
	go func() { _ = s.Follow(ctx, engine, bustest.Logger()) }()

	call := machine.Call{ToolName: "web_search", Arguments: json.RawMessage(`{"query":"q"}`), CallerBotID: "b", ConversationID: "c"}
	verdictFor := func() machine.Action {
		v, err := engine.Evaluate(ctx, call)
		require.NoError(t, err)
		return v.Action
	}
	assert.Equal(t, machine.ActionAsk, verdictFor(), "built-in default: ask")
	doc, err := policy.Parse([]byte("default: {requiresApprovalTools: none}"))
	require.NoError(t, err)
	require.NoError(t, s.Set(ctx, doc))
	bustest.Eventually(t, 5*time.Second, 5*time.Millisecond, "the stored policy runs the call", func() (bool, any) { got := verdictFor(); return got == machine.ActionRun, got })
}

func TestGrantStore_MatchesOnlyItsConversation(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	g := stores.NewGrantStore(env.JS, env.Buckets.Grants)
	_, err := g.Add(ctx, policy.Grant{Pattern: "Bash(git push origin main)", ConversationID: "conv-1", By: "alice"}, time.Now())
	require.NoError(t, err)
	_, err = g.Add(ctx, policy.Grant{Pattern: "Bash"}, time.Now())
	assert.Error(t, err, "a grant says who gave it")

	push := machine.Call{ToolName: "Bash", Arguments: json.RawMessage(`{"command":"git push origin main"}`), ConversationID: "conv-1"}
	got, ok, err := g.Match(ctx, push, time.Now())
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, "alice", got.By)

	push.ConversationID = "conv-2"
	_, ok, err = g.Match(ctx, push, time.Now())
	require.NoError(t, err)
	assert.False(t, ok, "another conversation has no grant")
	push.ConversationID = "conv-1"
	push.Arguments = json.RawMessage(`{"command":"git push --force origin main"}`)
	_, ok, err = g.Match(ctx, push, time.Now())
	require.NoError(t, err)
	assert.False(t, ok, "another command is not covered")
}

// TestGrantStore_ConcurrentGrantsAllKept: grants of one conversation share
// a value changed by compare-and-set; none added at once is lost.
func TestGrantStore_ConcurrentGrantsAllKept(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	g := stores.NewGrantStore(env.JS, env.Buckets.Grants)
	var eg errgroup.Group
	for i := range 20 {
		eg.Go(func() error {
			_, err := g.Add(ctx, policy.Grant{Pattern: fmt.Sprintf("Bash(make target-%d)", i), ConversationID: "busy", By: "alice"}, time.Now())
			return err
		})
	}
	require.NoError(t, eg.Wait())
	grants, err := g.List(ctx, "busy")
	require.NoError(t, err)
	assert.Len(t, grants, 20)
}

// TestGrantStore_FollowingMatchesFromMemory: a store that follows the
// bucket matches a grant another process recorded, and goes on matching
// with the NATS server gone: a submit reads no bucket for its grants.
func TestGrantStore_FollowingMatchesFromMemory(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	writer, follower := stores.NewGrantStore(env.JS, env.Buckets.Grants), stores.NewGrantStore(env.JS, env.Buckets.Grants)
	_, err := writer.Add(ctx, policy.Grant{Pattern: "Bash(make test)", ConversationID: "early", By: "alice"}, time.Now())
	require.NoError(t, err)
	followCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- follower.Follow(followCtx, bustest.Logger()) }()
	t.Cleanup(func() { stop(); <-done })
	bustest.Eventually(t, 10*time.Second, 5*time.Millisecond, "the follower read the bucket", func() (bool, any) { ok := follower.Synced(); return ok, "not synced" })

	call := func(conv, command string) machine.Call {
		args, _ := json.Marshal(map[string]string{"command": command})
		return machine.Call{ToolName: "Bash", Arguments: args, ConversationID: conv}
	}
	_, ok, err := follower.Match(ctx, call("early", "make test"), time.Now())
	require.NoError(t, err)
	assert.True(t, ok, "a grant recorded before it followed")
	_, err = writer.Add(ctx, policy.Grant{Pattern: "Bash(git push origin main)", ConversationID: "late", By: "alice"}, time.Now())
	require.NoError(t, err)
	bustest.Eventually(t, 10*time.Second, 5*time.Millisecond, "a grant recorded elsewhere reached the follower", func() (bool, any) {
		_, ok, err := follower.Match(ctx, call("late", "git push origin main"), time.Now())
		return err == nil && ok, fmt.Sprintf("matched %t, error %v", ok, err)
	})

	env.Servers[0].Shutdown()
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, ok, err = follower.Match(short, call("late", "git push origin main"), time.Now())
	require.NoError(t, err, "matched from memory, with the server gone")
	assert.True(t, ok)
	_, ok, err = follower.Match(short, call("late", "git push --force origin main"), time.Now())
	require.NoError(t, err)
	assert.False(t, ok, "another command is still not covered")
	_, _, err = writer.Match(short, call("late", "git push origin main"), time.Now())
	assert.Error(t, err, "a store that does not follow reads the bucket, which is gone")
}

// TestGrantStore_ExpiryAlwaysAndRevocation: a window grant matches until
// its expiry and not after; an "always" grant (no conversation) matches
// every conversation of its team; a revoked grant stops matching on
// another process that follows the bucket within a second.
func TestGrantStore_ExpiryAlwaysAndRevocation(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	writer, follower := stores.NewGrantStore(env.JS, env.Buckets.Grants), stores.NewGrantStore(env.JS, env.Buckets.Grants)
	followCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- follower.Follow(followCtx, bustest.Logger()) }()
	t.Cleanup(func() { stop(); <-done })
	bustest.Eventually(t, 10*time.Second, 5*time.Millisecond, "the follower read the bucket", func() (bool, any) { ok := follower.Synced(); return ok, "not synced" })

	now := time.UnixMilli(1_800_000_000_000)
	call := func(conv, team string) machine.Call {
		return machine.Call{ToolName: "web_search", Arguments: json.RawMessage(`{"query":"q"}`), ConversationID: conv, Team: team}
	}
	window, err := writer.Add(ctx, policy.Grant{Pattern: "web_search", ConversationID: "w", By: "alice", ExpiresAt: now.Add(2 * time.Hour).UnixMilli()}, now)
	require.NoError(t, err)
	_, ok, err := writer.Match(ctx, call("w", ""), now.Add(2*time.Hour-time.Millisecond))
	require.NoError(t, err)
	assert.True(t, ok, "in force until its expiry")
	_, ok, err = writer.Match(ctx, call("w", ""), now.Add(2*time.Hour))
	require.NoError(t, err)
	assert.False(t, ok, "not at its expiry")

	always, err := writer.Add(ctx, policy.Grant{Pattern: "web_search", Team: "research", By: "bob"}, now)
	require.NoError(t, err)
	bustest.Eventually(t, 10*time.Second, 5*time.Millisecond, "the always grant reached the follower", func() (bool, any) {
		_, ok, err := follower.Match(ctx, call("any-conversation", "research"), now)
		return err == nil && ok, fmt.Sprintf("matched %t, error %v", ok, err)
	})
	_, ok, err = follower.Match(ctx, call("any-conversation", "finance"), now)
	require.NoError(t, err)
	assert.False(t, ok, "another team's calls")

	all, err := follower.All(ctx)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{window.ID, always.ID}, []string{all[0].ID, all[1].ID})

	revoked, err := writer.Revoke(ctx, always.ID)
	require.NoError(t, err)
	assert.Equal(t, "bob", revoked.By)
	start := time.Now()
	bustest.Eventually(t, 10*time.Second, 5*time.Millisecond, "the revocation reached the follower", func() (bool, any) {
		_, ok, err := follower.Match(ctx, call("any-conversation", "research"), now)
		return err == nil && !ok, fmt.Sprintf("matched %t, error %v", ok, err)
	})
	assert.Less(t, time.Since(start), time.Second, "revoked on another process within a second")
	_, err = writer.Revoke(ctx, always.ID)
	assert.ErrorIs(t, err, machine.ErrNotFound, "revoked already")
}

// TestGrantStore_ASingleUseGrantLetsOneOfEightRacingCallsRun: eight calls
// it covers race for a single-use grant, through two stores (two
// processes): exactly one matches it, and it is gone.
func TestGrantStore_ASingleUseGrantLetsOneOfEightRacingCallsRun(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	stores := []*stores.GrantStore{stores.NewGrantStore(env.JS, env.Buckets.Grants), stores.NewGrantStore(env.JS, env.Buckets.Grants)}
	followCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- stores[1].Follow(followCtx, bustest.Logger()) }()
	t.Cleanup(func() { stop(); <-done })
	bustest.Eventually(t, 10*time.Second, 5*time.Millisecond, "the second store read the bucket", func() (bool, any) { ok := stores[1].Synced(); return ok, "not synced" })

	_, err := stores[0].Add(ctx, policy.Grant{Pattern: "deploy", ConversationID: "once", By: "alice", SingleUse: true}, time.Now())
	require.NoError(t, err)
	c := machine.Call{ToolName: "deploy", Arguments: json.RawMessage(`{}`), ConversationID: "once"}
	bustest.Eventually(t, 10*time.Second, 5*time.Millisecond, "the follower heard of the grant", func() (bool, any) {
		grants, err := stores[1].All(ctx)
		return err == nil && len(grants) == 1, fmt.Sprintf("%d grants, error %v", len(grants), err)
	})

	var matched atomic.Int32
	var eg errgroup.Group
	for i := range 8 {
		eg.Go(func() error {
			_, ok, err := stores[i%2].Match(ctx, c, time.Now())
			if ok {
				matched.Add(1)
			}
			return err
		})
	}
	require.NoError(t, eg.Wait())
	assert.Equal(t, int32(1), matched.Load(), "exactly one call got the single-use grant")
	left, err := stores[0].List(ctx, "once")
	require.NoError(t, err)
	assert.Empty(t, left, "consumed")
}

// TestPolicyStore_ClearShadowSetAgainMeanwhileConflicts: clearing the
// shadow policy at a revision it has moved on from is machine.ErrConflict,
// and leaves the shadow set since.
func TestPolicyStore_ClearShadowSetAgainMeanwhileConflicts(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0])
	ctx := t.Context()
	s := stores.NewPolicyStore(env.JS, env.Buckets.Policies)
	doc, err := policy.Parse([]byte(policyYAML))
	require.NoError(t, err)
	first, err := s.SetShadow(ctx, doc)
	require.NoError(t, err)
	second, err := s.SetShadow(ctx, doc)
	require.NoError(t, err)

	require.ErrorIs(t, s.ClearShadow(ctx, first), machine.ErrConflict)
	_, rev, err := s.GetShadow(ctx)
	require.NoError(t, err)
	assert.Equal(t, second, rev, "the shadow set since stays")

	require.NoError(t, s.ClearShadow(ctx, second))
	got, rev, err := s.GetShadow(ctx)
	require.NoError(t, err)
	assert.Nil(t, got)
	assert.Zero(t, rev)
}

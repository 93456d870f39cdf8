package server_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/server"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

// TestAuth_EachCredentialDoesOnlyWhatItsRoleMay holds the embedded
// server's trust chain against what someone holding one credential could
// try: toolgate answers only requests the role allows, as the identity the
// credential names, and nothing a refused request tried changed anything.
func TestAuth_EachCredentialDoesOnlyWhatItsRoleMay(t *testing.T) {
	t.Parallel()
	g := toolgatetest.Start(t, toolgatetest.Options{Roles: []string{"relay", "intake"}})
	ctx := t.Context()

	_, err := nats.Connect(g.NATSURL)
	require.ErrorIs(t, err, nats.ErrAuthorization, "an anonymous client is refused")

	agentNC, agent := g.ConnectAs(t, "agent")
	approverNC, approver := g.ConnectAs(t, "approver")
	_, viewer := g.ConnectAs(t, "viewer")
	mine, err := agent.Submit(ctx, machine.Call{ToolCallID: "t1", ToolName: "deploy", ConversationID: "auth"})
	require.NoError(t, err)
	assert.Equal(t, "agent", mine.CallerBotID, "the caller is the credential's name")
	_, err = agent.Submit(ctx, machine.Call{ToolCallID: "t2", ToolName: "deploy", ConversationID: "auth", CallerBotID: "approver"})
	require.ErrorIs(t, err, machine.ErrForbidden, "an agent submits as itself only")
	theirs, err := g.Client.Submit(ctx, machine.Call{ToolCallID: "t3", ToolName: "deploy", ConversationID: "auth", CallerBotID: "other-bot"})
	require.NoError(t, err)
	bustest.WaitRelayed(t, g.JS) // the submits' events are in, before counting
	eventsBefore := streamLastSeq(t, g.JS, wire.EventsStream)

	// What an agent's credential cannot do.
	_, err = agent.Decide(ctx, wire.DecideRequest{PendingID: mine.PendingID, Approved: true})
	require.ErrorIs(t, err, machine.ErrForbidden, "an agent may not decide")
	_, err = agent.Get(ctx, theirs.PendingID)
	require.ErrorIs(t, err, machine.ErrNotFound, "an agent does not see another's call")
	_, err = agent.SetPolicy(ctx, "default: {requiresApprovalTools: none}\n")
	require.ErrorIs(t, err, machine.ErrForbidden, "an agent may not change the policy")
	js, err := jetstream.New(agentNC)
	require.NoError(t, err)
	_, err = js.KeyValue(ctx, wire.CallsBucket)
	require.Error(t, err, "an agent has no JetStream: it reaches no bucket")
	fake, _ := json.Marshal(wire.Event{Type: wire.SubjectApprovalGranted, Entry: mine})
	require.NoError(t, agentNC.Publish(wire.SubjectApprovalGranted, fake))
	require.NoError(t, agentNC.Publish("$KV."+wire.CallsBucket+"."+mine.PendingID, fake))
	require.NoError(t, agentNC.Flush())
	heard := make(chan *nats.Msg, 2)
	_, err = agentNC.Subscribe(wire.EntrySubject("other-bot", theirs.PendingID), func(m *nats.Msg) { heard <- m })
	require.NoError(t, err)
	require.NoError(t, agentNC.Flush())
	// Nor does an approver's hear the agents' announcements, which carry
	// the arguments unmasked.
	_, err = approverNC.Subscribe(wire.EntrySubjectPrefix+">", func(m *nats.Msg) { heard <- m })
	require.NoError(t, err)
	require.NoError(t, approverNC.Flush())

	// What an approver's and a viewer's cannot.
	_, err = approver.Decide(ctx, wire.DecideRequest{PendingID: mine.PendingID, Approved: true, By: "bob"})
	require.ErrorIs(t, err, machine.ErrForbidden, "the approver may not decide as bob")
	_, err = viewer.Decide(ctx, wire.DecideRequest{PendingID: mine.PendingID, Approved: true})
	require.ErrorIs(t, err, machine.ErrForbidden, "a viewer may not decide")
	_, err = viewer.Submit(ctx, machine.Call{ToolCallID: "v", ToolName: "deploy", ConversationID: "auth"})
	require.ErrorIs(t, err, machine.ErrForbidden, "a viewer may not submit")

	// Nothing changed: no event, the calls as they were, the policy too.
	got, err := viewer.Get(ctx, mine.PendingID)
	require.NoError(t, err)
	assert.Equal(t, machine.StatePendingApproval, got.Status)
	assert.Equal(t, eventsBefore, streamLastSeq(t, g.JS, wire.EventsStream), "no event was published")
	doc, err := viewer.Policy(ctx)
	require.NoError(t, err)
	assert.Zero(t, doc.Revision, "no policy was stored")

	// The approver decides, as itself; the agent hears of its own call
	// and never of the other's.
	announced := make(chan *nats.Msg, 8)
	_, err = agentNC.ChanSubscribe(wire.EntrySubject("agent", mine.PendingID), announced)
	require.NoError(t, err)
	require.NoError(t, agentNC.Flush())
	out := make(chan client.Outcome, 1)
	go func() {
		o, _ := agent.Await(ctx, mine.PendingID)
		out <- o
	}()
	got, err = approver.Decide(ctx, wire.DecideRequest{PendingID: mine.PendingID, Approved: true, Reason: "ok"})
	require.NoError(t, err)
	assert.Equal(t, "approver", got.ApprovedOrRejectedByUserID)
	select {
	case m := <-announced:
		var ev wire.Event
		require.NoError(t, json.Unmarshal(m.Data, &ev))
		assert.Equal(t, mine.PendingID, ev.Entry.PendingID)
	case <-time.After(30 * time.Second):
		t.Fatal("the agent's credential never heard its own call's announcement")
	}
	select {
	case o := <-out:
		assert.Equal(t, client.Approved, o.Kind)
	case <-time.After(30 * time.Second):
		t.Fatal("the agent never heard its call's approval")
	}
	_, err = g.Client.Cancel(ctx, theirs.PendingID, "", "done")
	require.NoError(t, err)
	bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, fmt.Sprintf("%s reached event %d: the cancel's events", wire.EventsStream, eventsBefore+2), func() (bool, any) {
		got := streamLastSeq(t, g.JS, wire.EventsStream)
		return got >= eventsBefore+2, got
	})
	select {
	case m := <-heard:
		t.Fatalf("an announcement reached a credential not its caller's: %s on %s", m.Data, m.Subject)
	default:
	}
}

// TestAuth_IssuedCredentialsAndRevocation: an admin issues a named
// identity, which acts as itself; once revoked, the server refuses it.
func TestAuth_IssuedCredentialsAndRevocation(t *testing.T) {
	t.Parallel()
	g := toolgatetest.Start(t, toolgatetest.Options{Roles: []string{"relay", "intake"}, Policy: "default: {approvers: [alice]}\n"})
	ctx := t.Context()
	_, admin := g.ConnectAs(t, "admin")
	_, agent := g.ConnectAs(t, "agent")

	_, err := agent.IssueCredential(ctx, "mallory", wire.RoleAdmin)
	require.ErrorIs(t, err, machine.ErrForbidden, "only an admin issues credentials")
	_, err = admin.IssueCredential(ctx, "bad name", wire.RoleApprover)
	require.ErrorIs(t, err, machine.ErrInvalid)
	issued, err := admin.IssueCredential(ctx, "alice", wire.RoleApprover)
	require.NoError(t, err)
	_, err = admin.IssueCredential(ctx, "alice", wire.RoleApprover)
	require.ErrorIs(t, err, machine.ErrConflict, "one live credential per name")
	path := filepath.Join(t.TempDir(), "alice.creds")
	require.NoError(t, os.WriteFile(path, []byte(issued.Creds), 0o600))

	aliceNC, alice := g.ConnectAs(t, path)
	e, err := agent.Submit(ctx, machine.Call{ToolCallID: "t1", ToolName: "deploy", ConversationID: "creds"})
	require.NoError(t, err)
	got, err := alice.Decide(ctx, wire.DecideRequest{PendingID: e.PendingID, Approved: true})
	require.NoError(t, err)
	assert.Equal(t, "alice", got.ApprovedOrRejectedByUserID, "the policy's approver is the credential's name")

	ids, err := admin.Credentials(ctx)
	require.NoError(t, err)
	var names []string
	for _, id := range ids {
		names = append(names, fmt.Sprintf("%s/%s", id.Name, id.Role))
	}
	assert.Subset(t, names, []string{"alice/approver", "agent/agent", "approver/approver", "viewer/viewer", "admin/admin", "executor/executor"})

	revoked, err := admin.RevokeCredential(ctx, "alice")
	require.NoError(t, err)
	require.Len(t, revoked, 1)
	assert.Equal(t, issued.Identity.Key, revoked[0].Key)
	bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "the embedded server disconnects a revoked credential", func() (bool, any) {
		return aliceNC.IsClosed() || !aliceNC.IsConnected(), aliceNC.Status()
	})
	opts, err := client.Credentials(path)
	require.NoError(t, err)
	_, err = nats.Connect(g.NATSURL, opts...)
	require.ErrorIs(t, err, nats.ErrAuthorization, "a revoked credential is refused")
	_, err = admin.RevokeCredential(ctx, "alice")
	require.ErrorIs(t, err, machine.ErrNotFound, "nothing left to revoke")
}

// TestAuth_ARevokedCredentialIsRefusedFromTheStart: a toolgate started
// again over a data directory that lists a revoked credential refuses it
// as soon as it is ready, and its request API answers from then on
// (applying the revocations re-registers the clients' imports: done
// after serving began, it left a moment with no responder).
func TestAuth_ARevokedCredentialIsRefusedFromTheStart(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	opts := toolgatetest.Options{Roles: []string{"relay", "intake"}, Configure: func(c *server.Config) { c.Data = data }}
	path := filepath.Join(t.TempDir(), "alice.creds")
	t.Run("first start", func(t *testing.T) {
		g := toolgatetest.Start(t, opts)
		_, admin := g.ConnectAs(t, "admin")
		issued, err := admin.IssueCredential(t.Context(), "alice", wire.RoleViewer)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, []byte(issued.Creds), 0o600))
		_, err = admin.RevokeCredential(t.Context(), "alice")
		require.NoError(t, err)
	}) // stops it

	g := toolgatetest.Start(t, opts)
	copts, err := client.Credentials(path)
	require.NoError(t, err)
	_, err = nats.Connect(g.NATSURL, copts...)
	require.ErrorIs(t, err, nats.ErrAuthorization, "a revoked credential is refused once toolgate serves")
	_, viewer := g.ConnectAs(t, "viewer")
	_, err = viewer.Credentials(t.Context())
	require.ErrorIs(t, err, machine.ErrForbidden, "the request API answers (and refuses a viewer)")
}

func streamLastSeq(t *testing.T, js jetstream.JetStream, name string) uint64 {
	t.Helper()
	s, err := js.Stream(t.Context(), name)
	require.NoError(t, err)
	info, err := s.Info(t.Context())
	require.NoError(t, err)
	return info.State.LastSeq
}

// Issuing credentials leaves the request API answering every client: the
// revocations are applied to the running server only when the revoked
// keys change (applying them re-registers the clients' account's imports,
// and a request sent meanwhile found no responder).
func TestAuth_IssuingCredentialsLeavesRequestsAnswered(t *testing.T) {
	t.Parallel()
	g := toolgatetest.Start(t, toolgatetest.Options{Roles: []string{"relay", "intake"}})
	ctx := t.Context()
	_, admin := g.ConnectAs(t, "admin")
	agentNC, _ := g.ConnectAs(t, "agent")

	stop := make(chan struct{})
	done := make(chan error, 1)
	var sent int
	go func() {
		req := []byte(`{"pendingId":"conv.none"}`)
		for {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			sent++
			if _, err := agentNC.Request(wire.APISubject(wire.EndpointGet), req, 10*time.Second); err != nil {
				done <- fmt.Errorf("request %d: %w", sent, err)
				return
			}
		}
	}()
	for i := range 20 {
		_, err := admin.IssueCredential(ctx, fmt.Sprintf("user-%02d", i), wire.RoleViewer)
		require.NoError(t, err)
	}
	close(stop)
	require.NoError(t, <-done, "a request while credentials were issued")
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/backup"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/server"
	"github.com/toolgate/toolgate/internal/servetest"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

// TestBackup_TakenUnderLoadRestoresIntoANewServerThatCarriesOn: a backup
// taken while calls are submitted and decided, restored into a new
// toolgate, holds every call answered before it started; a call pending
// then is still pending with its deadline, and runs once approved; a
// finished call's receipts verify; an agent's credential issued before
// still submits; and the events are each revision's once.
func TestBackup_TakenUnderLoadRestoresIntoANewServerThatCarriesOn(t *testing.T) {
	t.Parallel()
	url := startToolgate(t, "")
	ctx := t.Context()
	bot := agent(t, url)

	botCreds := filepath.Join(t.TempDir(), "bot-7.creds")
	r := cli(t, url, "creds", "add", "--user", "bot-7", "--role", "agent", "--out", botCreds)
	require.Equal(t, 0, r.code, r.stderr)
	pending, err := bot.Submit(ctx, bashCall("kept", "pending", "make deploy"))
	require.NoError(t, err)
	require.Equal(t, machine.StatePendingApproval, pending.Status)
	finished, err := bot.Submit(ctx, bashCall("kept", "finished", "rm -rf /"))
	require.NoError(t, err)
	r = cli(t, url, "reject", finished.PendingID, "--reason", "no", as(t, url, "alice"))
	require.Equal(t, 0, r.code, r.stderr)

	// Load: calls submitted, and every other one rejected, until the
	// backup is done.
	var mu sync.Mutex
	answered := map[string]machine.State{} // the calls toolgate answered for, and their state then
	loadCtx, stopLoad := context.WithCancel(ctx)
	loadDone := make(chan error, 1)
	go func() {
		loadDone <- func() error {
			for i := 0; loadCtx.Err() == nil; i++ {
				e, err := bot.Submit(loadCtx, bashCall("load", fmt.Sprint(i), "echo hi"))
				if loadCtx.Err() != nil {
					return nil
				} else if err != nil {
					return err
				}
				if i%2 == 0 {
					if e, err = bot.Decide(loadCtx, wire.DecideRequest{PendingID: e.PendingID, Approved: false, By: "loader", Reason: "load"}); loadCtx.Err() != nil {
						return nil
					} else if err != nil {
						return err
					}
				}
				mu.Lock()
				answered[e.PendingID] = e.Status
				mu.Unlock()
			}
			return nil
		}()
	}()
	bustest.Eventually(t, 30*time.Second, 10*time.Millisecond, "20 calls of load", func() (bool, any) {
		mu.Lock()
		defer mu.Unlock()
		return len(answered) >= 20, len(answered)
	})
	mu.Lock()
	before := map[string]machine.State{pending.PendingID: machine.StatePendingApproval, finished.PendingID: machine.StateRejectedByUser}
	for id, s := range answered {
		before[id] = s
	}
	mu.Unlock()
	dir := filepath.Join(t.TempDir(), "backup")
	r = cli(t, url, "backup", dir)
	stopLoad()
	require.NoError(t, <-loadDone)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "KV_tool_calls")
	assert.Contains(t, r.stdout, "the trust chain of")
	m, err := backup.ReadManifest(dir)
	require.NoError(t, err)
	assert.Equal(t, "KV_tool_calls", m.Streams[0].Name, "the calls are taken first")
	var taken []string
	for _, s := range m.Streams {
		taken = append(taken, s.Name)
	}
	assert.ElementsMatch(t, bus.Streams(), taken, "every stream toolgate provisions")
	assert.Contains(t, m.Trust, "keys.json")
	t.Logf("backup: %d calls answered before it, %d after it started", len(before), len(answered)-len(before))

	// Restored into a new data directory, then served.
	data := t.TempDir()
	r = cli(t, "", "restore", dir, "--data", data)
	require.Equal(t, 0, r.code, r.stderr)
	r = cli(t, "", "restore", dir, "--data", data)
	require.Equal(t, 1, r.code, "a second restore over the first")
	assert.Contains(t, r.stderr, "the server has KV_tool_calls")
	assert.Contains(t, r.stderr, "--replace")
	g := toolgatetest.Start(t, toolgatetest.Options{Configure: func(c *server.Config) { c.Data = data }})
	url2 := served(t, g)
	bot2 := agent(t, url2)

	for id, was := range before {
		e, err := bot2.Get(ctx, id)
		require.NoError(t, err, "call %s, %s before the backup", id, was)
		assert.True(t, e.Status == was || !was.Terminal(), "call %s: %s before the backup, %s restored", id, was, e.Status)
	}
	got, err := bot2.Get(ctx, pending.PendingID)
	require.NoError(t, err)
	assert.Equal(t, machine.StatePendingApproval, got.Status)
	assert.Equal(t, pending.ApprovalTimeoutAt, got.ApprovalTimeoutAt, "its deadline")

	// The pending call runs once approved.
	x, err := bot2.NewExecutor(client.ExecutorOptions{Lease: 5 * time.Second})
	require.NoError(t, err)
	x.Handle("Bash", func(context.Context, client.Call) (client.Result, error) {
		return client.Result{Output: json.RawMessage(`{"deployed":true}`)}, nil
	})
	xctx, stopX := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- x.Run(xctx) }()
	t.Cleanup(func() { stopX(); <-ran })
	// alice's credential, issued before the backup, decides.
	r = cli(t, url2, "approve", pending.PendingID, as(t, url, "alice"))
	require.Equal(t, 0, r.code, r.stderr)
	out, err := bot2.Await(ctx, pending.PendingID, client.UntilFinished())
	require.NoError(t, err)
	assert.Equal(t, client.Executed, out.Kind, "%+v", out)

	// Receipts signed before the backup, and after it, verify.
	for _, id := range []string{finished.PendingID, pending.PendingID} {
		r = cli(t, url2, "verify", id)
		assert.Equal(t, 0, r.code, "verify %s: %s%s", id, r.stdout, r.stderr)
	}

	// The agent's credential issued before the backup submits.
	opts, err := client.Credentials(botCreds)
	require.NoError(t, err)
	nc, err := nats.Connect(url2, opts...)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	agent7, err := client.New(nc)
	require.NoError(t, err)
	e, err := agent7.Submit(ctx, machine.Call{ToolCallID: "after", ToolName: "Bash", Arguments: json.RawMessage(`{"command":"ls"}`), ConversationID: "restored"})
	require.NoError(t, err)
	assert.Equal(t, "bot-7", e.CallerBotID)

	// Every revision's events once: none dropped by the restore is
	// missing, none is doubled.
	_, js := servetest.Connect(t, url2)
	bustest.Eventually(t, 30*time.Second, 50*time.Millisecond, "the relay caught up", func() (bool, any) {
		c, err := js.Consumer(ctx, "KV_"+wire.CallsBucket, "toolgate-relay")
		if err != nil {
			return false, err
		}
		info, err := c.Info(ctx)
		if err != nil {
			return false, err
		}
		return info.NumPending == 0 && info.NumAckPending == 0, fmt.Sprintf("pending %d, unacked %d", info.NumPending, info.NumAckPending)
	})
	ids := eventIDs(t, js)
	seen := map[string]int{}
	for _, id := range ids {
		seen[id]++
	}
	for id, n := range seen {
		assert.Equal(t, 1, n, "event %s", id)
	}
	for _, id := range []string{pending.PendingID, finished.PendingID} {
		assert.True(t, hasEventOf(ids, id), "no event of %s", id)
	}
	// And each event is of a revision the calls' bucket holds: none of
	// a write made after the bucket's snapshot, which the restored
	// toolgate never made.
	calls, err := js.Stream(ctx, "KV_"+wire.CallsBucket)
	require.NoError(t, err)
	for _, id := range ids {
		i := strings.LastIndexByte(id, ':')
		rev, _, _ := strings.Cut(id[i+1:], ".")
		seq, err := strconv.ParseUint(rev, 10, 64)
		require.NoError(t, err, id)
		msg, err := calls.GetMsg(ctx, seq)
		require.NoError(t, err, "the revision of event %s", id)
		var e struct {
			PendingID string `json:"pendingId"`
		}
		require.NoError(t, json.Unmarshal(msg.Data, &e))
		assert.Equal(t, id[:i], e.PendingID, "event %s: revision %d is another call's", id, seq)
	}
}

// eventIDs are the ids of every event in TOOL_EVENTS, in order.
func eventIDs(t *testing.T, js jetstream.JetStream) []string {
	t.Helper()
	ctx := t.Context()
	st, err := js.Stream(ctx, wire.EventsStream)
	require.NoError(t, err)
	n := st.CachedInfo().State.Msgs
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	require.NoError(t, err)
	var ids []string
	for uint64(len(ids)) < n {
		batch, err := cons.Fetch(int(min(n-uint64(len(ids)), 500)), jetstream.FetchMaxWait(5*time.Second))
		require.NoError(t, err)
		for msg := range batch.Messages() {
			ids = append(ids, msg.Headers().Get(jetstream.MsgIDHeader))
		}
		require.NoError(t, batch.Error())
	}
	return ids
}

func hasEventOf(ids []string, pendingID string) bool {
	for _, id := range ids {
		if strings.HasPrefix(id, pendingID+":") {
			return true
		}
	}
	return false
}

// TestRestore_RefusesAnotherTrustChain: credentials issued by either
// chain would stop working, so a data directory with another trust
// chain is not overwritten.
func TestRestore_RefusesAnotherTrustChain(t *testing.T) {
	t.Parallel()
	url := startToolgate(t, "")
	dir := filepath.Join(t.TempDir(), "backup")
	r := cli(t, url, "backup", dir)
	require.Equal(t, 0, r.code, r.stderr)

	data := t.TempDir()
	require.NoError(t, server.InitTrust(data))
	keys, err := os.ReadFile(filepath.Join(server.TrustDir(data), "keys.json"))
	require.NoError(t, err)
	r = cli(t, "", "restore", dir, "--data", data)
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "keys.json differs from the backup's")
	after, err := os.ReadFile(filepath.Join(server.TrustDir(data), "keys.json"))
	require.NoError(t, err)
	assert.Equal(t, keys, after)

	r = cli(t, url, "backup", dir)
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "is not empty")
}

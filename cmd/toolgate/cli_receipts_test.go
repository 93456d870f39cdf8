package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/servetest"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// TestCLI_ReceiptAndVerify: `receipt ID` prints a call's receipts and
// `receipt ID --json` writes the chain that `verify FILE --key PUB` checks
// offline; verify trusts toolgate's published keys without --key (and
// says so), fetches a chain by ID, and fails, exit 1, naming the receipt,
// for a changed file, a forged key, or a decision rewritten in the bucket.
func TestCLI_ReceiptAndVerify(t *testing.T) {
	t.Parallel()
	url := startToolgate(t, "default: {requiresApprovalTools: all}\n")
	ctx := t.Context()
	bot := agent(t, url)
	alice := as(t, url, "alice")

	e, err := bot.Submit(ctx, bashCall("conv-r", "1", "make release"))
	require.NoError(t, err)
	r := cli(t, url, "approve", e.PendingID, alice, "--reason", "ship it")
	require.Equal(t, 0, r.code, r.stderr)
	_, err = bot.Started(ctx, e.PendingID, "runner")
	require.NoError(t, err)
	_, err = bot.Succeed(ctx, e.PendingID, "runner", json.RawMessage(`{"exit":0}`), 0)
	require.NoError(t, err)
	keys, err := bot.ReceiptKeys(ctx)
	require.NoError(t, err)
	key := keys.Key

	r = cli(t, url, "receipt", e.PendingID, alice)
	require.Equal(t, 0, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 5, r.stdout)
	assert.Regexp(t, `^SEQ\s+EVENT\s+FROM → TO\s+ACTOR\s+TIME\s+KEY\s+HASH`, lines[0])
	assert.Regexp(t, `^1\s+ask\s+\(new\) → PENDING_APPROVAL\s+policy\s`, lines[1])
	assert.Regexp(t, `^2\s+approve\s+PENDING_APPROVAL → APPROVED_READY_FOR_EXECUTION\s+alice\s+\S+Z\s+`+key[:10]+`…\s+sha256:[0-9a-f]{12}…`, lines[2])
	assert.Regexp(t, `^4\s+succeed\s+EXECUTING → COMPLETED_SUCCESS\s+runner\s`, lines[4])

	r = cli(t, url, "receipt", e.PendingID, alice, "--json")
	require.Equal(t, 0, r.code, r.stderr)
	file := writeFile(t, "chain.json", r.stdout)
	ch := decode[wire.ReceiptChain](t, []byte(r.stdout))
	assert.Len(t, ch.Receipts, 4)

	// Offline, with the key given: no toolgate is asked.
	r = cli(t, "", "verify", file, "--key", key, "--nats", "nats://127.0.0.1:1")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "OK: 4 receipts of "+e.PendingID+", signed by "+key+"\n", r.stdout)
	assert.Empty(t, r.stderr)
	// The keys toolgate publishes, said so.
	r = cli(t, url, "verify", file)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "OK: 4 receipts")
	assert.Contains(t, r.stderr, "trusting the receipt keys toolgate publishes ("+key+")")
	// By ID, as an approver sees it: arguments masked or not, checked.
	r = cli(t, url, "verify", e.PendingID, alice, "--key", key)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "OK: 4 receipts")

	// A forged key.
	other, err := nkeys.CreateServer()
	require.NoError(t, err)
	otherPub, _ := other.PublicKey()
	r = cli(t, url, "verify", file, "--key", otherPub)
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "toolgate verify: FAILED: "+e.PendingID+": receipt 1 (ask by policy at ")
	assert.Contains(t, r.stderr, "not a trusted key")
	r = cli(t, url, "verify", file, "--key", "nope")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, `"nope" is not a receipt key`)

	// The file changed: the approval's actor.
	ch.Receipts[1].Actor = "mallory"
	data, err := json.Marshal(ch)
	require.NoError(t, err)
	r = cli(t, url, "verify", writeFile(t, "forged.json", string(data)), "--key", key)
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "receipt 2 (approve by mallory at ")
	assert.Contains(t, r.stderr, "signature does not verify")

	// An entry as the bucket holds it verifies too (an archived record).
	_, js := servetest.Connect(t, url)
	kv, err := js.KeyValue(ctx, wire.CallsBucket)
	require.NoError(t, err)
	kve, err := kv.Get(ctx, e.PendingID)
	require.NoError(t, err)
	r = cli(t, "", "verify", writeFile(t, "entry.json", string(kve.Value())), "--key", key)
	require.Equal(t, 0, r.code, r.stderr)

	// A rejection turned into an approval in the bucket.
	rej, err := bot.Submit(ctx, bashCall("conv-r", "2", "rm -rf build"))
	require.NoError(t, err)
	r = cli(t, url, "reject", rej.PendingID, alice, "--reason", "no")
	require.Equal(t, 0, r.code, r.stderr)
	kve, err = kv.Get(ctx, rej.PendingID)
	require.NoError(t, err)
	var stored machine.Entry
	require.NoError(t, json.Unmarshal(kve.Value(), &stored))
	stored.Status = machine.StateApproved
	stored.DecisionScope = machine.ScopeOnce
	data, err = json.Marshal(&stored)
	require.NoError(t, err)
	_, err = kv.Update(ctx, rej.PendingID, data, kve.Revision())
	require.NoError(t, err)
	r = cli(t, url, "verify", rej.PendingID, "--key", key)
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "entry: status is APPROVED_READY_FOR_EXECUTION, but the last receipt, receipt 2 (reject by alice at ")

	// Neither a file nor an ID.
	r = cli(t, url, "verify", filepath.Join(t.TempDir(), "missing file"))
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "no such file, nor a call's ID")
	_, err = os.Stat(file)
	require.NoError(t, err)
}

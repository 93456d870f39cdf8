package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/server"
	"github.com/toolgate/toolgate/internal/servetest"
	"github.com/toolgate/toolgate/machine"
)

// TestServe_ApproversSeeSecretsMaskedTheExecutorRunsThem: a call whose
// arguments hold a bearer token and a value the policy's redact pattern
// names is shown masked in a webhook and to an approver's and an admin's
// `show`, whose --reveal shows the admin the arguments as they are and
// is refused to the approver; an approver's edit of the masked arguments keeps the
// secrets it left as shown, and the executor's handler receives the real
// values with the edit.
func TestServe_ApproversSeeSecretsMaskedTheExecutorRunsThem(t *testing.T) {
	t.Parallel()
	hooks := make(chan []byte, 10)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		hooks <- body
	}))
	t.Cleanup(hook.Close)
	url := startToolgate(t, fmt.Sprintf(`
default:
  requiresApprovalTools: [http_call]
  redact: ["*pin"]
  notify: [{type: webhook, url: %q, secret: hook-secret}]
`, hook.URL))
	data := servetest.DataDir(t, url)
	const token, pin = "s3cr3t-t0k3n-123456", "4321"
	args := fmt.Sprintf(`{"url":"https://api.example/a","headers":{"Authorization":"Bearer %s"},"user_pin":%q}`, token, pin)

	opts, err := client.Credentials(server.CredsPath(data, "executor"))
	require.NoError(t, err)
	nc, err := nats.Connect(url, opts...)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	exec, err := client.New(nc)
	require.NoError(t, err)
	x, err := exec.NewExecutor(client.ExecutorOptions{Lease: 5 * time.Second})
	require.NoError(t, err)
	ran := make(chan json.RawMessage, 1)
	x.Handle("http_call", func(_ context.Context, c client.Call) (client.Result, error) {
		ran <- c.Arguments
		return client.Result{Output: json.RawMessage(`{"status":200}`)}, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- x.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	e, err := agent(t, url).Submit(t.Context(), machine.Call{ToolCallID: "m1", ToolName: "http_call", Arguments: json.RawMessage(args), CallerBotID: "bot", ConversationID: "mask"})
	require.NoError(t, err)
	require.Equal(t, machine.StatePendingApproval, e.Status)

	select {
	case body := <-hooks:
		assert.NotContains(t, string(body), token)
		assert.NotContains(t, string(body), pin)
		assert.Contains(t, string(body), `"user_pin":"[redacted]"`)
	case <-time.After(30 * time.Second):
		t.Fatal("no webhook within 30s")
	}

	alice := as(t, url, "alice")
	r := cli(t, url, "show", e.PendingID, alice, "--json")
	require.Equal(t, 0, r.code, r.stderr)
	shown := decode[machine.Entry](t, []byte(r.stdout))
	assert.JSONEq(t, `{"url":"https://api.example/a","headers":{"Authorization":"[redacted]"},"user_pin":"[redacted]"}`, string(shown.ToolArguments))
	r = cli(t, url, "show", e.PendingID, "--json") // the admin
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, shown, decode[machine.Entry](t, []byte(r.stdout)), "an admin reads the same masked view")
	assert.True(t, shown.SecretsMasked)
	r = cli(t, url, "show", e.PendingID, "--reveal", "--json") // the admin, whom the policy lets reveal
	require.Equal(t, 0, r.code, r.stderr)
	assert.JSONEq(t, args, string(decode[machine.Entry](t, []byte(r.stdout)).ToolArguments))
	r = cli(t, url, "show", e.PendingID, alice, "--reveal")
	assert.Equal(t, 1, r.code, "an approver may not reveal")
	assert.Contains(t, r.stderr, "may not reveal")

	// The approver edits what they were shown: another URL, the rest as is.
	r = cli(t, url, "approve", e.PendingID, alice, "--args", `{"url":"https://api.example/b","headers":{"Authorization":"[redacted]"},"user_pin":"[redacted]"}`)
	require.Equal(t, 0, r.code, r.stderr)
	select {
	case got := <-ran:
		assert.JSONEq(t, fmt.Sprintf(`{"url":"https://api.example/b","headers":{"Authorization":"Bearer %s"},"user_pin":%q}`, token, pin), string(got))
	case <-time.After(30 * time.Second):
		t.Fatal("the executor never ran the call")
	}
}

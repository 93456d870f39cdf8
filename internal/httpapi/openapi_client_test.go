package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
)

// TestOpenAPI_GeneratedClientWorks generates a Go client from the document
// with oapi-codegen (the version testdata/oapiclient/go.mod pins), builds
// it with a program that holds epoch milliseconds and sequences in int64
// variables, and runs it against a real toolgate: it lists, approves and
// reads a call as a generator's user would. Once the modules are in the
// cache this takes a few seconds; the first run downloads them.
func TestOpenAPI_GeneratedClientWorks(t *testing.T) {
	t.Parallel()
	g := toolgatetest.Start(t, toolgatetest.Options{Roles: []string{"relay", "http"}, Policy: specPolicy, Tokens: tokens})
	h := &harness{t: t, url: g.HTTPURL}
	submitted := h.submit("generated", "c1")

	spec, err := filepath.Abs("openapi.json")
	require.NoError(t, err)
	dir := t.TempDir()
	for _, name := range []string{"go.mod", "go.sum", "main.go"} {
		data, err := os.ReadFile(filepath.Join("testdata", "oapiclient", name))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), data, 0o600))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	run := func(name string, args ...string) []byte {
		t.Helper()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = dir
		// The client's module is its own: not this one's workspace, and no
		// toolchain but the one running the test.
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOTOOLCHAIN=local", "GOFLAGS=-mod=readonly")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		require.NoError(t, err, "%s %v: %s", name, args, stderr.String())
		return out
	}
	// go test puts its own go first on the PATH.
	run("go", "tool", "oapi-codegen", "-generate", "types,client", "-package", "main", "-o", "client.gen.go", spec)
	run("go", "build", "-o", "oapiclient", ".")
	out := run(filepath.Join(dir, "oapiclient"), g.HTTPURL, "alice-token-000000001", "generated")

	var seen struct {
		RequestedAt, EventsSeq, DecisionTime, HistoryAt, Revision int64
		Status, DecidedBy, NotFound                               string
	}
	require.NoError(t, json.Unmarshal(out, &seen), "%s", out)
	assert.Equal(t, submitted.RequestedAt, seen.RequestedAt)
	assert.Greater(t, seen.RequestedAt, int64(math.MaxInt32), "epoch milliseconds overflow an int32")
	assert.Positive(t, seen.EventsSeq)
	assert.GreaterOrEqual(t, seen.DecisionTime, seen.RequestedAt)
	assert.Equal(t, string(machine.StateApproved), seen.Status)
	assert.Equal(t, "alice", seen.DecidedBy)
	assert.Equal(t, seen.DecisionTime, seen.HistoryAt, "the history's last transition is the approval")
	assert.Positive(t, seen.Revision)
	assert.Equal(t, "not_found", seen.NotFound)

	var stored machine.Entry
	require.Equal(t, http.StatusOK, h.do("GET", "/v1/tool-calls/"+submitted.PendingID, "viewer-token-00000001", nil, &stored))
	assert.Equal(t, "approved by a generated client", stored.StatusReason)
}

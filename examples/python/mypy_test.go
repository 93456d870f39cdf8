package python

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// userProgram is code of a user who type-checks strictly: it sees the
// package's names as exported, and its answers typed.
const userProgram = `import threading
from typing import List, Optional

import toolgate


def run(client: toolgate.Client, stop: threading.Event) -> Optional[toolgate.Entry]:
    v: toolgate.Verdict = client.submit_and_wait("send_email", {"to": "a@example.com"}, "support-42", stop=stop)
    if v.kind == toolgate.RUN and v.outcome is not None:
        client.started(v.pending_id)
        return client.succeeded(v.pending_id, {"sent": True})
    return v.entry


@toolgate.gate(toolgate.Client("http://127.0.0.1:8080"), conversation_id="support-42")
def send_email(to: str) -> str:
    return "sent to " + to


def pending(client: toolgate.Client) -> List[str]:
    entries, _ = client.pending()
    return [e.pending_id + " " + e.tool_name for e in entries]


def why(err: toolgate.RejectedError) -> str:
    return err.by + ": " + err.reason + " " + send_email("x")
`

// TestPython_SDKTypeChecksStrictly runs mypy --strict over sdk/python's
// package, and over a user's program that uses it, for the oldest Python
// the package supports: the package ships py.typed, so its annotations
// are a promise to its users' type checkers.
func TestPython_SDKTypeChecksStrictly(t *testing.T) {
	t.Parallel()
	mypy, err := exec.LookPath("mypy")
	require.NoError(t, err, "the Python SDK's type check needs mypy (apt-get install -y mypy; .ci/run installs it)")
	pkg, err := filepath.Abs("../../sdk/python/toolgate")
	require.NoError(t, err)
	dir := t.TempDir()
	user := filepath.Join(dir, "user.py")
	require.NoError(t, os.WriteFile(user, []byte(userProgram), 0o600))

	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	cmd := exec.CommandContext(ctx, mypy, "--strict", "--python-version", "3.9", "--cache-dir", filepath.Join(dir, "cache"), pkg, user)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "mypy --strict sdk/python/toolgate:\n%s", out)
}

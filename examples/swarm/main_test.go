package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/toolgate/toolgate/internal/bus/bustest"
)

// TestSwarm_EveryCallEndsTerminal runs the example as the README's tour
// does: a real `toolgate serve` process with the example's policy, and
// the swarm against it.
func TestSwarm_EveryCallEndsTerminal(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "toolgate")
	out, err := exec.Command("go", "build", "-o", bin, "../../cmd/toolgate").CombinedOutput()
	require.NoError(t, err, string(out))

	listen := fmt.Sprintf("127.0.0.1:%d", bustest.FreePort(t))
	data := t.TempDir()
	serve := exec.Command(bin, "serve", "--data", data, "--listen", listen, "--http", "127.0.0.1:0", "--policy", "policy.yaml")
	stderr, err := serve.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, serve.Start())
	t.Cleanup(func() { _ = serve.Process.Kill(); _ = serve.Wait() })
	serving := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "toolgate serving") {
				close(serving)
			}
		}
	}()
	select {
	case <-serving:
	case <-time.After(60 * time.Second):
		t.Fatal("toolgate serve not serving after 60s")
	}

	var buf bytes.Buffer
	require.NoError(t, run(t.Context(), []string{"--nats", "nats://" + listen, "--data", data, "--calls", "6"}, &buf), buf.String())
	report := buf.String()
	assert.Contains(t, report, "18 calls:")
	assert.Contains(t, report, "every call is terminal")
	// Every third email leaves the company; transfers over 150 EUR (the
	// 4th to 6th) are refused.
	assert.Contains(t, report, fmt.Sprintf("REJECTED_BY_USER %d", 2+3))
	assert.Contains(t, report, fmt.Sprintf("COMPLETED_SUCCESS %d", 18-5))
}

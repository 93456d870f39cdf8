package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

var (
	buildOnce sync.Once
	binDir    string
	binary    string
	buildErr  error
)

func TestMain(m *testing.M) {
	isolateTests()
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// toolgateBinary builds cmd/toolgate once per test run, for tests that
// run a verb as its own process: an MCP server on stdio, a hook.
func toolgateBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "toolgate-bin-")
		if buildErr != nil {
			return
		}
		binary = filepath.Join(binDir, "toolgate")
		out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	require.NoError(t, buildErr)
	return binary
}

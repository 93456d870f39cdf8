package claudecode_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/claudecode"
)

// channel runs a Channel on pipes: send writes a message to it, lines is
// what it wrote so far.
type channel struct {
	in    *io.PipeWriter
	mu    sync.Mutex
	lines []string
}

func runChannel(t *testing.T, g claudecode.Gate, session string) *channel {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ch := &channel{in: inW}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = claudecode.NewChannel(g, session, "test", claudecode.Options{Caller: "claude-code"}, slog.New(slog.DiscardHandler)).Run(ctx, inR, outW)
		outW.Close()
	}()
	go func() {
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			ch.mu.Lock()
			ch.lines = append(ch.lines, sc.Text())
			ch.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		inW.Close()
		cancel()
		<-done
	})
	return ch
}

func (c *channel) prompt(t *testing.T, id, tool, preview string) {
	t.Helper()
	params, _ := json.Marshal(claudecode.PermissionPrompt{RequestID: id, ToolName: tool, Description: "a call", InputPreview: preview})
	msg, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": claudecode.MethodPermissionRequest, "params": json.RawMessage(params)})
	_, err := c.in.Write(append(msg, '\n'))
	require.NoError(t, err)
}

func (c *channel) said(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range c.lines {
		if strings.Contains(l, `"`+id+`"`) {
			return true
		}
	}
	return false
}

// A preview Claude Code cut short is not the call: the channel submits
// nothing and answers nothing, and Claude Code's dialog decides.
func TestChannel_ACutShortPreviewIsLeftToClaudeCodesDialog(t *testing.T) {
	t.Parallel()
	c := startGate(t)
	const session = "channel-cut"
	ch := runChannel(t, c, session)

	long := `{"command":"npm test -- ` + strings.Repeat("x", 200)
	ch.prompt(t, "cutaa", "Bash", long[:200]+"…")
	ch.prompt(t, "whole", "Bash", `{"command":"npm test"}`)
	bustest.Eventually(t, 20*time.Second, 10*time.Millisecond, "the whole prompt answered", func() (bool, any) {
		return ch.said("whole"), "no verdict for whole yet"
	})
	all := calls(t, c, session, "Bash")
	require.Len(t, all, 1, describe(all))
	assert.JSONEq(t, `{"command":"npm test"}`, string(all[0].ToolArguments), "only the prompt whose input it saw whole")
	assert.False(t, ch.said("cutaa"), "no verdict: Claude Code's dialog decides")
}

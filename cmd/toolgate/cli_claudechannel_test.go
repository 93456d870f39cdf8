package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/claudecode"
	"github.com/toolgate/toolgate/internal/server"
	"github.com/toolgate/toolgate/internal/servetest"
	"github.com/toolgate/toolgate/machine"
)

// channelTestdata holds Claude Code's documented permission-relay
// messages, and the channel's answers to them.
var channelTestdata = filepath.Join("..", "..", "internal", "claudecode", "testdata", "channel")

func channelMessage(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(channelTestdata, name+".json"))
	require.NoError(t, err)
	return bytes.TrimSpace(data)
}

// channelProcess is a running `toolgate claude-channel`, as Claude Code
// launches it: its stdin and stdout are the MCP stream.
type channelProcess struct {
	stdin io.WriteCloser
	mu    sync.Mutex
	lines []string // what it wrote to stdout so far
}

func (p *channelProcess) send(t *testing.T, msg []byte) {
	t.Helper()
	_, err := p.stdin.Write(append(msg, '\n'))
	require.NoError(t, err)
}

// await waits for a line of stdout that contains want, and returns it.
func (p *channelProcess) await(t *testing.T, what, want string) string {
	t.Helper()
	var found string
	bustest.Eventually(t, 20*time.Second, 10*time.Millisecond, what, func() (bool, any) {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, l := range p.lines {
			if strings.Contains(l, want) {
				found = l
				return true, nil
			}
		}
		return false, p.lines
	})
	return found
}

func startChannel(t *testing.T, natsURL, creds, session string) *channelProcess {
	t.Helper()
	cmd := exec.Command(toolgateBinary(t), "claude-channel", "--nats", natsURL, "--nats-creds", creds)
	cmd.Env = append(os.Environ(), "CLAUDE_CODE_SESSION_ID="+session)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = &syncWriter{w: &bytes.Buffer{}}
	require.NoError(t, cmd.Start())
	p := &channelProcess{stdin: stdin}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	})
	return p
}

// The golden test of the channel, driven by Claude Code's documented
// messages: it declares the permission relay; a prompt a human must
// decide becomes a pending call, and an approval through the CLI sends
// the allow for that request_id; prompts the policy decides are answered
// at once; a prompt answered first in Claude Code (the PostToolUse hook
// reports the tool ran) is withdrawn, saying so; the session ending
// withdraws what is left.
func TestClaudeChannel_RelaysPermissionPrompts(t *testing.T) {
	t.Parallel()
	nats, _ := startWithHTTP(t, hookPolicy)
	agent := server.CredsPath(servetest.DataDir(t, nats), "agent")
	const session = "sess-channel"
	ch := startChannel(t, nats, agent, session)

	ch.send(t, channelMessage(t, "initialize"))
	var init struct {
		Result struct {
			Capabilities struct {
				Experimental map[string]json.RawMessage
			}
		}
	}
	require.NoError(t, json.Unmarshal([]byte(ch.await(t, "the initialize result", `"id":0`)), &init))
	assert.Contains(t, init.Result.Capabilities.Experimental, claudecode.ChannelCapability)
	assert.Contains(t, init.Result.Capabilities.Experimental, claudecode.ChannelPermissionCapability)
	ch.send(t, channelMessage(t, "initialized"))

	// The policy's verdicts are answered at once.
	ch.send(t, channelMessage(t, "permission_request.allow"))
	ch.send(t, channelMessage(t, "permission_request.deny"))
	assert.JSONEq(t, `{"jsonrpc":"2.0","method":"notifications/claude/channel/permission","params":{"request_id":"mnopq","behavior":"allow"}}`,
		ch.await(t, "npm test allowed by the policy", `"mnopq"`))
	assert.JSONEq(t, `{"jsonrpc":"2.0","method":"notifications/claude/channel/permission","params":{"request_id":"rstuv","behavior":"deny"}}`,
		ch.await(t, "rm -rf denied by the policy", `"rstuv"`))

	// A prompt a human decides: pending in toolgate until approved.
	ch.send(t, channelMessage(t, "permission_request.ask"))
	push := pendingCall(t, nats, session, "git push origin feature")
	assert.True(t, strings.HasPrefix(push.ToolCallID, "ch_tbxkq_"), push.ToolCallID)
	r := cli(t, nats, "approve", push.PendingID, "--reason", "release", as(t, nats, "alice"))
	require.Equal(t, 0, r.code, r.stderr)
	assert.JSONEq(t, string(channelMessage(t, "permission.allow")), ch.await(t, "the approval relayed", `"tbxkq"`))

	// Answered in Claude Code first: the tool ran, and the PostToolUse
	// hook withdraws the channel's call.
	ch.send(t, channelMessage(t, "permission_request.local"))
	tag := pendingCall(t, nats, session, "git tag v1.0.0")
	hook := exec.Command(toolgateBinary(t), "hook", "claude-code", "--nats", nats, "--nats-creds", agent)
	hook.Stdin = bytes.NewReader(channelMessage(t, "PostToolUse.local"))
	out, err := hook.CombinedOutput()
	require.NoError(t, err, string(out))
	e := getCall(t, nats, tag.PendingID)
	assert.Equal(t, machine.StateCancelled, e.Status)
	assert.Contains(t, e.StatusReason, "answered first in Claude Code (the tool ran")

	// The session ends: what nobody decided is withdrawn.
	ch.send(t, []byte(strings.Replace(string(channelMessage(t, "permission_request.local")), "wxyza", "bcdef", 1)))
	left := pendingCall(t, nats, session, "git tag v1.0.0")
	require.NoError(t, ch.stdin.Close())
	bustest.Eventually(t, 20*time.Second, 10*time.Millisecond, "the last prompt withdrawn as the session ends", func() (bool, any) {
		e := getCall(t, nats, left.PendingID)
		return e.Status == machine.StateCancelled, e.StatusReason
	})
	assert.Contains(t, getCall(t, nats, left.PendingID).StatusReason, "the Claude Code session ended")
	ch.mu.Lock()
	defer ch.mu.Unlock()
	for _, l := range ch.lines {
		assert.NotContains(t, l, "wxyza", "a prompt answered in Claude Code gets no verdict")
		assert.NotContains(t, l, "bcdef")
	}
}

// pendingCall waits for the session's pending call of command.
func pendingCall(t *testing.T, url, session, command string) *machine.Entry {
	t.Helper()
	c := agent(t, url)
	var found *machine.Entry
	bustest.Eventually(t, 20*time.Second, 10*time.Millisecond, "a pending call of "+command, func() (bool, any) {
		all, err := clientGate{c}.Calls(t.Context(), session, "Bash")
		if err != nil {
			return false, err
		}
		for _, e := range all {
			var args struct{ Command string }
			_ = json.Unmarshal(e.ToolArguments, &args)
			if e.Status == machine.StatePendingApproval && args.Command == command {
				found = e
				return true, nil
			}
		}
		return false, all
	})
	return found
}

func getCall(t *testing.T, url, pendingID string) *machine.Entry {
	t.Helper()
	e, err := agent(t, url).Get(t.Context(), pendingID)
	require.NoError(t, err)
	return e
}

package claudecode_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/claudecode"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

var update = flag.Bool("update", false, "rewrite the golden files")

const gatePolicy = `
default:
  requiresApprovalTools: [Bash, Write]
  readOnlyTools: [Read]
  rules:
    deny: ["Bash(rm -rf *)"]
    allow: ["Bash(npm test:*)"]
conversations:
  rejects-at-1s:
    approvalTimeoutMs: 1000
    autoRejectOnTimeout: true
  overdue-at-200ms:
    approvalTimeoutMs: 200
    autoRejectOnTimeout: false
  alice-or-bob:
    approvers: [alice, bob]
`

// gateClient is the hooks' Gate over the request API, as the CLI builds
// it, and a client to decide and read calls with (toolgate's own identity).
type gateClient struct{ *client.Client }

func (g gateClient) Calls(ctx context.Context, conversationID, toolName string) ([]*machine.Entry, error) {
	return g.List(ctx, wire.ListRequest{ConversationID: conversationID, ToolName: toolName})
}

// startGate runs toolgate's request API, relay and timer on a real
// embedded server, under gatePolicy, and returns a client of it.
func startGate(t *testing.T) gateClient {
	t.Helper()
	return startGateWith(t, "relay", "intake", "timer")
}

// startGateWith runs roles under gatePolicy.
func startGateWith(t *testing.T, roles ...string) gateClient {
	t.Helper()
	return gateClient{toolgatetest.Start(t, toolgatetest.Options{Roles: roles, Policy: gatePolicy}).Client}
}

func errorsIsUnavailable(err error) bool { return errors.Is(err, client.ErrUnavailable) }

// input is a hook input as Claude Code documents it.
func input(event, tool, toolInput, id string) []byte {
	return []byte(`{"session_id":"abc123","transcript_path":"/home/u/.claude/projects/p/abc123.jsonl","cwd":"/home/u/p",` +
		`"permission_mode":"default","hook_event_name":"` + event + `","tool_name":"` + tool + `","tool_input":` + toolInput +
		`,"tool_use_id":"` + id + `"}`)
}

func handle(t *testing.T, g claudecode.Gate, raw []byte, opts claudecode.Options) []byte {
	t.Helper()
	in, err := claudecode.ParseInput(raw)
	require.NoError(t, err)
	out, err := claudecode.Handle(t.Context(), g, in, opts)
	require.NoError(t, err)
	data, err := json.MarshalIndent(out, "", "  ")
	require.NoError(t, err)
	return append(data, '\n')
}

// stamps are the times an answer names (an ask's deadline), which a golden
// file holds as <time>.
var stamps = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`)

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	got = stamps.ReplaceAll(got, []byte("<time>"))
	path := filepath.Join("testdata", name+".json")
	if *update {
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./claudecode -update")
	assert.Equal(t, string(want), string(got))
}

func TestHooks_Golden(t *testing.T) {
	t.Parallel()
	c := startGate(t)
	opts := claudecode.Options{Caller: "claude-code"}
	for _, event := range []string{claudecode.EventPreToolUse, claudecode.EventPermissionRequest} {
		t.Run(event, func(t *testing.T) {
			t.Parallel()
			golden(t, event+".allow", handle(t, c, input(event, "Bash", `{"command":"npm test -- --watch=false"}`, "toolu_allow_"+event), opts))
			golden(t, event+".deny", handle(t, c, input(event, "Bash", `{"command":"rm -rf /"}`, "toolu_deny_"+event), opts))
			golden(t, event+".ask", handle(t, c, input(event, "Write", `{"file_path":"/home/u/p/a.go","content":"package a"}`, "toolu_ask_"+event),
				claudecode.Options{Wait: 200 * time.Millisecond}))
			asked, err := c.Get(t.Context(), machine.PendingID("abc123", "toolu_ask_"+event))
			require.NoError(t, err)
			assert.Equal(t, machine.StateCancelled, asked.Status, "handed back to Claude Code: withdrawn from toolgate")

			// An approver edits the input while the hook waits: until the
			// call is there to decide, and decided (an attempt whose answer
			// was lost on a loaded machine may have decided it).
			id := machine.PendingID("abc123", "toolu_edit_"+event)
			in, err := claudecode.ParseInput(input(event, "Bash", `{"command":"git push --force origin main"}`, "toolu_edit_"+event))
			require.NoError(t, err)
			type handled struct {
				out any
				err error
			}
			waited := make(chan handled, 1)
			go func() {
				out, err := claudecode.Handle(t.Context(), c, in, opts)
				waited <- handled{out, err}
			}()
			bustest.Eventually(t, 10*time.Second, 10*time.Millisecond, "the edited call decided", func() (bool, any) {
				_, err := c.Decide(context.Background(), wire.DecideRequest{PendingID: id, Approved: true, By: "alice", Reason: "with a safer remote",
					Arguments: json.RawMessage(`{"command":"git push origin feature"}`)})
				if err == nil {
					return true, nil
				}
				e, getErr := c.Get(context.Background(), id)
				if getErr != nil {
					return false, fmt.Sprintf("deciding: %v; reading: %v", err, getErr)
				}
				return e.Status != machine.StatePendingApproval, fmt.Sprintf("deciding: %v; %s", err, e.Status)
			})
			h := <-waited
			require.NoError(t, h.err)
			data, err := json.MarshalIndent(h.out, "", "  ")
			require.NoError(t, err)
			golden(t, event+".edited", append(data, '\n'))
		})
	}
}

// A toolgate that cannot be asked blocks the call: deny, saying why,
// unless the hook is told to hand it to Claude Code's prompt (OnError).
func TestHooks_UnreachableDenies(t *testing.T) {
	t.Parallel()
	env := bustest.Start(t, bustest.Topologies[0]) // NATS, but no toolgate on it
	c, err := client.New(env.NC, client.WithRequestTimeout(500*time.Millisecond), client.WithUnavailableWait(time.Second))
	require.NoError(t, err)
	for _, event := range []string{claudecode.EventPreToolUse, claudecode.EventPermissionRequest} {
		got := handle(t, gateClient{c}, input(event, "Bash", `{"command":"rm -rf /"}`, "toolu_1"), claudecode.Options{})
		var out struct {
			HookSpecificOutput struct {
				PermissionDecision       claudecode.Behavior
				PermissionDecisionReason string
				Decision                 claudecode.PermissionResult
			}
		}
		require.NoError(t, json.Unmarshal(got, &out))
		if event == claudecode.EventPreToolUse {
			assert.Equal(t, claudecode.Deny, out.HookSpecificOutput.PermissionDecision)
			assert.Contains(t, out.HookSpecificOutput.PermissionDecisionReason, "not reachable")
		} else {
			assert.Equal(t, claudecode.Deny, out.HookSpecificOutput.Decision.Behavior, string(got))
			assert.Contains(t, out.HookSpecificOutput.Decision.Message, "not reachable")
		}
	}

	got := handle(t, gateClient{c}, input(claudecode.EventPreToolUse, "Bash", `{"command":"ls"}`, "toolu_2"), claudecode.Options{OnError: claudecode.Ask})
	var out claudecode.PreToolUseOutput
	require.NoError(t, json.Unmarshal(got, &out))
	assert.Equal(t, claudecode.Ask, out.HookSpecificOutput.PermissionDecision, "told to: Claude Code's prompt decides")
	assert.Contains(t, out.HookSpecificOutput.PermissionDecisionReason, "not reachable")
}

// A refusal of the call (here: a hook whose identity may not submit) is
// a deny, whatever OnError says: no outage, and asking again will not help.
func TestHooks_RefusedIsDeniedWhateverOnErrorSays(t *testing.T) {
	t.Parallel()
	d := claudecode.Unreachable(claudecode.Options{OnError: claudecode.Ask}, fmt.Errorf("%w: bob may not submit calls", machine.ErrForbidden))
	assert.Equal(t, claudecode.Deny, d.Behavior)
	assert.Contains(t, d.Reason, "bob may not submit calls")
}

// What toolgate answers when it will not take a hook, or fails one: the
// decision events are denied; the others, which block nothing, are told.
func TestRefuse_AnswersInTheShapeOfTheEvent(t *testing.T) {
	t.Parallel()
	for event, want := range map[string]string{
		claudecode.EventPreToolUse:        `{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"no credential"}}`,
		claudecode.EventPermissionRequest: `{"hookSpecificOutput":{"hookEventName":"PermissionRequest","decision":{"behavior":"deny","message":"no credential"}}}`,
		claudecode.EventPostToolUse:       `{"systemMessage":"no credential"}`,
		"":                                `{"systemMessage":"no credential"}`,
	} {
		got, err := json.Marshal(claudecode.Refuse(event, "no credential"))
		require.NoError(t, err)
		assert.JSONEq(t, want, string(got), event)
	}
	in, err := claudecode.ParseInput(postToolUse("s", "Bash", `{}`, "toolu_1", `{}`, ""))
	require.NoError(t, err)
	got, err := json.Marshal(claudecode.Failed(in, claudecode.Options{}, errors.New("toolgate is not reachable")))
	require.NoError(t, err)
	assert.JSONEq(t, `{"systemMessage":"toolgate could not record how Bash went: toolgate is not reachable"}`, string(got))

	assert.Equal(t, claudecode.EventPermissionRequest, claudecode.EventOf([]byte(`{"hook_event_name":"PermissionRequest","tool_name":7}`)))
	assert.Empty(t, claudecode.EventOf([]byte(`not json`)))
}

func TestHooks_PostToolUseRecordsTheResult(t *testing.T) {
	t.Parallel()
	c := startGate(t)
	pre := input(claudecode.EventPreToolUse, "Bash", `{"command":"npm test"}`, "toolu_run")
	handle(t, c, pre, claudecode.Options{})
	post := []byte(`{"session_id":"abc123","hook_event_name":"PostToolUse","tool_name":"Bash","tool_input":{"command":"npm test"},` +
		`"tool_use_id":"toolu_run","tool_response":{"stdout":"ok","exitCode":0}}`)
	assert.Equal(t, "{}\n", string(handle(t, c, post, claudecode.Options{})))
	assert.Equal(t, "{}\n", string(handle(t, c, post, claudecode.Options{})), "a hook run twice records once")
	e, err := c.Get(t.Context(), machine.PendingID("abc123", "toolu_run"))
	require.NoError(t, err)
	assert.Equal(t, machine.StateCompletedSuccess, e.Status)
	assert.JSONEq(t, `{"stdout":"ok","exitCode":0}`, string(e.Result))

	handle(t, c, input(claudecode.EventPreToolUse, "Bash", `{"command":"npm test -x"}`, "toolu_fail"), claudecode.Options{})
	fail := []byte(`{"session_id":"abc123","hook_event_name":"PostToolUseFailure","tool_name":"Bash","tool_input":{},"tool_use_id":"toolu_fail","error":"exit 1"}`)
	handle(t, c, fail, claudecode.Options{})
	e, err = c.Get(t.Context(), machine.PendingID("abc123", "toolu_fail"))
	require.NoError(t, err)
	assert.Equal(t, machine.StateCompletedFailure, e.Status)
	assert.Equal(t, "exit 1", e.Error)
}

func TestParseInput_NamesTheMissingField(t *testing.T) {
	t.Parallel()
	_, err := claudecode.ParseInput([]byte(`{"session_id":"s","hook_event_name":"PreToolUse"}`))
	assert.ErrorContains(t, err, "tool_name: required")
	assert.ErrorIs(t, err, machine.ErrInvalid)
	_, err = claudecode.ParseInput([]byte(`not json`))
	assert.ErrorContains(t, err, "hook input")
	_, err = claudecode.ParseInput([]byte(`{"session_id":"` + strings.Repeat("s", machine.MaxID+1) + `","hook_event_name":"PreToolUse","tool_name":"Bash"}`))
	assert.ErrorContains(t, err, "session_id: at most 256 bytes, got 257")
}

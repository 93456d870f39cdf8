package worker_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/machine"
)

// TestNotifier_ARunWhoseOutcomeIsUnknownIsTold: an approved call whose
// executor is lost mid-run ends with its outcome unknown, and the
// channels that were told of its approval are told of that too, saying
// how to run it again; a run that fails as runs do tells nobody.
func TestNotifier_ARunWhoseOutcomeIsUnknownIsTold(t *testing.T) {
	t.Parallel()
	hook := ntListen(t, nil)
	env, engine, m := ntEnv(t, fmt.Sprintf("default:\n  notify:\n    - {type: slack, url: %q}\n", hook.URL+"/slack"))
	ntStart(t, env, engine, nil, ntFast(3)...)
	later := machine.New(env.Store, machine.WithClock(func() time.Time { return time.Now().Add(time.Hour) }))
	run := func(id string) *machine.Entry {
		e := ntSubmit(t, m, machine.Call{ToolCallID: id})
		_, err := m.Decide(t.Context(), e.PendingID, machine.Decision{Approve: true, By: "alice"})
		require.NoError(t, err)
		_, err = m.Claim(t.Context(), e.PendingID, "exec-1", time.Minute)
		require.NoError(t, err)
		return e
	}
	failed := run("fails")
	_, err := m.Fail(t.Context(), failed.PendingID, machine.Outcome{Holder: "exec-1", Error: "smtp down"})
	require.NoError(t, err)
	lost := run("lost")
	_, err = later.AbandonLease(t.Context(), lost.PendingID)
	require.NoError(t, err)

	var texts []string
	for range 5 { // each call's ask and approval, and the unknown outcome
		got := hook.next(t, "a message")
		var msg struct {
			Text string `json:"text"`
		}
		require.NoError(t, json.Unmarshal(got.Body, &msg))
		texts = append(texts, msg.Text)
	}
	unknown := 0
	for _, text := range texts {
		if strings.HasPrefix(text, "Result unknown: send_email may have run, and its executor was lost (toolgate retry "+lost.PendingID+" runs it again)") {
			unknown++
		}
		assert.NotContains(t, text, "smtp down", "a run that failed as runs do is not news")
	}
	assert.Equal(t, 1, unknown, "%q", texts)
}

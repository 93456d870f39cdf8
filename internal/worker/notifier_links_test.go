package worker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/machine"
)

// ntIssuer issues tokens named after their call and approver, and
// remembers what it was asked.
type ntIssuer struct {
	mu    sync.Mutex
	asked []string
}

func (i *ntIssuer) IssueDecisionTokens(_ context.Context, pendingID, approver string) (string, string, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.asked = append(i.asked, approver)
	return "approve-" + approver, "reject-" + approver, nil
}

func (i *ntIssuer) count() int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return len(i.asked)
}

// TestNotifier_DecisionLinksOnlyForAChannelWithAnApprover: a webhook that
// names an approver gets the request's one-time links in its headers,
// issued for that approver, below the inboxUrl; one that names none gets
// none, and nobody issues tokens for it; the decision's message carries
// none.
func TestNotifier_DecisionLinksOnlyForAChannelWithAnApprover(t *testing.T) {
	t.Parallel()
	with, without := ntListen(t, nil), ntListen(t, nil)
	env, engine, m := ntEnv(t, fmt.Sprintf(`default:
  inboxUrl: "https://toolgate.example/"
  notify:
    - {type: webhook, url: %q, secret: s3cret, approver: alice}
    - {type: webhook, url: %q, secret: s3cret}
`, with.URL+"/hook", without.URL+"/hook"))
	issuer := &ntIssuer{}
	ntStart(t, env, engine, nil, append(ntFast(3), worker.WithDecisionTokens(issuer))...)

	e := ntSubmit(t, m, machine.Call{})
	got := with.next(t, "the request, to the channel with an approver")
	assert.Equal(t, "https://toolgate.example"+worker.DecisionTokenPath+"approve-alice", got.Header.Get(worker.HeaderDecisionApprove))
	assert.Equal(t, "https://toolgate.example"+worker.DecisionTokenPath+"reject-alice", got.Header.Get(worker.HeaderDecisionReject))
	got = without.next(t, "the request, to the channel without")
	assert.Empty(t, got.Header.Get(worker.HeaderDecisionApprove))
	assert.Empty(t, got.Header.Get(worker.HeaderDecisionReject))
	require.Equal(t, 1, issuer.count(), "tokens issued for the channel with an approver only")

	_, err := m.Decide(t.Context(), e.PendingID, machine.Decision{Approve: true, By: "alice"})
	require.NoError(t, err)
	got = with.next(t, "the decision")
	assert.Empty(t, got.Header.Get(worker.HeaderDecisionApprove), "a decision offers none")
	without.next(t, "the decision, to the other")
	assert.Equal(t, 1, issuer.count())
}

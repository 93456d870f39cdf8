package policy

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/machine"
)

// Every list of people takes group:NAME beside users; a field that names
// one user takes no group; a group's name is bounded and printable; a
// quorum is counted against the users alone.
func TestParse_GroupsInListsOfPeople(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, `
default:
  approvers: [alice, "group:payments-leads"]
  quorum:
    deploy: {required: 3, of: [alice, "group:sre"]}
    transfer_funds: {required: 2}
  escalate:
    - {afterMs: 60000, to: ["group:/acme/on call", bob]}
`, nil, nil)
	v, err := e.Evaluate(context.Background(), testCall{tool: "transfer_funds", args: `{"to":"x"}`}.call())
	require.NoError(t, err)
	assert.Equal(t, []string{"alice", "group:payments-leads"}, v.Approvers, "the policy names the group; its members are the sign-in's")
	assert.Equal(t, []string{"group:/acme/on call", "bob"}, v.Escalate[0].To)
	v, err = e.Evaluate(context.Background(), testCall{tool: "deploy", args: `{}`}.call())
	require.NoError(t, err)
	assert.Equal(t, &machine.Quorum{Required: 3, Of: []string{"alice", "group:sre"}}, v.Quorum, "a group may hold the people three approvals need")

	long := strings.Repeat("g", 257)
	for _, tc := range []struct{ doc, want string }{
		{"default:\n  approvers: ['group:']", `default.approvers[0]: group: needs a group's name of 1 to 256 bytes, got 0 in "group:"`},
		{"default:\n  approvers: ['group:" + long + "']", `default.approvers[0]: group: needs a group's name of 1 to 256 bytes, got 257`},
		{"default:\n  approvers: [\"group:sre\\n\"]", `default.approvers[0]: "group:sre\n": a group's name is printable characters only`},
		{"default:\n  approvers: ['group: sre']", `default.approvers[0]: "group: sre": a group's name has no space at either end`},
		{"default:\n  approvers: ['group:sre', 'group:sre']", `default.approvers[1]: "group:sre" is listed twice`},
		{"default:\n  quorum: {deploy: {required: 2, of: ['group:']}}", `default.quorum["deploy"].of[0]: group: needs a group's name`},
		{"default:\n  escalate: [{afterMs: 1000, to: ['group:']}]", `default.escalate[0].to[0]: group: needs a group's name`},
		{"default:\n  userIdToApprove: 'group:sre'", `default.userIdToApprove: "group:sre": names one user, not a group: list a group in approvers instead`},
		{"default:\n  notify: [{type: ntfy, url: 'https://ntfy.sh', topic: t, approver: 'group:sre'}]", `default.notify[0].approver: "group:sre": names one user, not a group`},
		{"default:\n  quorum: {deploy: {required: 2, of: [alice, 'group:sre'], rejectWhen: majority}}",
			`default.quorum["deploy"].rejectWhen: majority: of names a group, whose members toolgate cannot count`},
		{"default:\n  approvers: [alice, 'group:sre']\n  quorum: {deploy: {required: 2, rejectWhen: majority}}",
			`default.quorum["deploy"].rejectWhen: majority: the scope's approvers name a group`},
		{"default:\n  quorum: {deploy: {required: 3, of: [a, b]}}", `default.quorum["deploy"].of: lists 2 users, fewer than the 3 approvals required`},
	} {
		_, err := Parse([]byte(tc.doc))
		require.Error(t, err, tc.doc)
		assert.Contains(t, err.Error(), tc.want, tc.doc)
	}
}

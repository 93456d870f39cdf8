package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/toolgate/toolgate/machine"
)

// exampleDocument is the document from the design brief, verbatim.
const exampleDocument = `default:
  requiresApprovalTools: [web_search, transfer_funds]
  approvalTimeoutMs: 300000
  autoRejectOnTimeout: true
  defaultDelayMs: 0
  toolSpecificDelays: {slow_report: 2000}
  readOnlyTools: [read_file, list_files]
  rules:
    deny: ["Bash(rm -rf *)"]
    ask: ["Bash(git push *)"]
    allow: ["Bash(npm test:*)"]
  describe:
    web_search: 'Search the web for "{{.query}}"'
teams:
  finance:
    requiresApprovalTools: all
    requireApprovalAboveCost: 100
    dailyCostLimit: 1000
    approvers: [alice, bob]
`

func TestParse_ExampleDocument(t *testing.T) {
	doc, err := Parse([]byte(exampleDocument))
	require.NoError(t, err)

	def := doc.Resolve("", "")
	assert.Equal(t, ToolSet{Tools: []string{"web_search", "transfer_funds"}}, def.RequiresApprovalTools)
	assert.Equal(t, 5*time.Minute, def.ApprovalTimeout)
	assert.True(t, def.AutoRejectOnTimeout)
	assert.Equal(t, time.Duration(0), def.DefaultDelay)
	assert.Equal(t, map[string]time.Duration{"slow_report": 2 * time.Second}, def.ToolSpecificDelays)
	assert.Equal(t, []string{"read_file", "list_files"}, def.ReadOnlyTools)
	assert.Equal(t, defaultEditTools, def.EditTools)
	require.Len(t, def.Rules.Deny, 1)
	require.Len(t, def.Rules.Ask, 1)
	require.Len(t, def.Rules.Allow, 1)
	assert.Equal(t, `rules.deny "Bash(rm -rf *)" (default)`, def.Rules.Deny[0].String())
	assert.Equal(t, `rules.ask "Bash(git push *)" (default)`, def.Rules.Ask[0].String())
	assert.Equal(t, `rules.allow "Bash(npm test:*)" (default)`, def.Rules.Allow[0].String())
	assert.Equal(t, map[string]string{"web_search": `Search the web for "{{.query}}"`}, def.Describe)
	assert.Nil(t, def.RequireApprovalAboveCost)
	assert.Nil(t, def.DailyCostLimit)
	assert.Nil(t, def.Approvers)
	assert.Equal(t, "", def.UserIDToApprove)
	assert.Equal(t, 3, def.MaxExecutionAttempts)
	assert.Equal(t, ModeDefault, def.PermissionMode)
	assert.Equal(t, "default", def.Sources["requiresApprovalTools"])
	assert.Equal(t, BuiltIn, def.Sources["maxExecutionAttempts"])
	assert.Equal(t, "default", def.Sources[`toolSpecificDelays["slow_report"]`])

	fin := doc.Resolve("finance", "")
	assert.Equal(t, ToolSet{All: true}, fin.RequiresApprovalTools)
	assert.Equal(t, "teams.finance", fin.Sources["requiresApprovalTools"])
	require.NotNil(t, fin.RequireApprovalAboveCost)
	assert.Equal(t, 100.0, *fin.RequireApprovalAboveCost)
	require.NotNil(t, fin.DailyCostLimit)
	assert.Equal(t, 1000.0, *fin.DailyCostLimit)
	assert.Equal(t, []string{"alice", "bob"}, fin.Approvers)
	// Inherited from the default scope.
	assert.Equal(t, 5*time.Minute, fin.ApprovalTimeout)
	assert.Equal(t, []string{"read_file", "list_files"}, fin.ReadOnlyTools)
	assert.Equal(t, map[string]time.Duration{"slow_report": 2 * time.Second}, fin.ToolSpecificDelays)
	assert.Len(t, fin.Rules.Deny, 1)
	assert.Equal(t, "default", fin.Sources["approvalTimeoutMs"])

	// A team the document does not name gets the default scope.
	assert.Equal(t, def.RequiresApprovalTools, doc.Resolve("marketing", "").RequiresApprovalTools)
}

func TestParse_JSON(t *testing.T) {
	doc, err := Parse([]byte(`{
		"default": {"requiresApprovalTools": "none", "approvalTimeoutMs": 60000, "rules": {"deny": ["Write(//etc/**)"]}},
		"conversations": {"c-1": {"permissionMode": "plan", "autoRejectOnTimeout": false}}
	}`))
	require.NoError(t, err)
	r := doc.Resolve("", "c-1")
	assert.Equal(t, ToolSet{}, r.RequiresApprovalTools)
	assert.Equal(t, time.Minute, r.ApprovalTimeout)
	assert.Equal(t, ModePlan, r.PermissionMode)
	assert.False(t, r.AutoRejectOnTimeout)
	assert.Equal(t, "conversations.c-1", r.Sources["autoRejectOnTimeout"])
}

func TestParse_JSONEscapesYAMLLacks(t *testing.T) {
	// As Python's json.dumps writes them: "\/" and a surrogate pair.
	doc, err := Parse([]byte(`{"default": {"describe": {"x": "a\/b \u00e9 \ud83d\ude00 <&>"}}}`))
	require.NoError(t, err)
	assert.Equal(t, "a/b é 😀 <&>", doc.Default.Describe["x"])

	_, err = Parse([]byte(`{"default": {"defaultDelayMs": 1, "defaultDelayMs": 2}}`))
	assert.ErrorContains(t, err, "policy: default.defaultDelayMs: set twice", "duplicate keys survive the rewrite")
	_, err = Parse([]byte(`{"default": {"defaultDelayMs": 1.5}}`))
	assert.ErrorContains(t, err, `policy: default.defaultDelayMs: must be an integer, got "1.5"`)
}

func TestParse_Empty(t *testing.T) {
	for _, in := range []string{"", "# nothing\n", "null", "{}"} {
		doc, err := Parse([]byte(in))
		require.NoError(t, err, "%q", in)
		r := doc.Resolve("t", "c")
		assert.Equal(t, ToolSet{All: true}, r.RequiresApprovalTools, "%q: asks about everything by default", in)
		assert.Equal(t, machine.DefaultApprovalTimeout, r.ApprovalTimeout)
		assert.True(t, r.AutoRejectOnTimeout)
		assert.Equal(t, defaultReadOnlyTools, r.ReadOnlyTools)
	}
}

func TestParse_Errors(t *testing.T) {
	tests := []struct {
		name, doc, want string
	}{
		{"negative tool delay", "teams:\n  finance:\n    toolSpecificDelays: {web_search: -5}",
			`policy: teams.finance.toolSpecificDelays["web_search"]: must be >= 0, got -5`},
		{"unknown top-level field", "defaults: {}", `policy: defaults: unknown field (did you mean default?)`},
		{"unknown policy field", "default:\n  requireApprovalTools: all",
			`policy: default.requireApprovalTools: unknown field (did you mean requiresApprovalTools?)`},
		{"unknown rule kind", "default:\n  rules: {reject: [Bash]}", `policy: default.rules.reject: unknown field`},
		{"duplicate key", "default:\n  defaultDelayMs: 1\n  defaultDelayMs: 2", `policy: default.defaultDelayMs: set twice`},
		{"wrong type", "default:\n  approvalTimeoutMs: soon", `policy: default.approvalTimeoutMs: must be an integer, got "soon"`},
		{"float for int", "default:\n  maxExecutionAttempts: 1.5", `policy: default.maxExecutionAttempts: must be an integer, got "1.5"`},
		{"bool", "default:\n  autoRejectOnTimeout: maybe", `policy: default.autoRejectOnTimeout: must be true or false, got "maybe"`},
		{"list expected", "default:\n  readOnlyTools: Read", `policy: default.readOnlyTools: must be a list, got "Read"`},
		{"mapping expected", "teams: [a]", `policy: teams: must be a mapping, got a list`},
		{"tool set word", "default:\n  requiresApprovalTools: some",
			`policy: default.requiresApprovalTools: must be a list of tools, "all" or "none", got "some"`},
		{"tool set entry", "default:\n  requiresApprovalTools: [web search]",
			`policy: default.requiresApprovalTools[0]: must be a tool name or an MCP server (mcp__server), got "web search"`},
		{"zero timeout", "default:\n  approvalTimeoutMs: 0", `policy: default.approvalTimeoutMs: must be >= 1, got 0`},
		{"huge delay", "default:\n  defaultDelayMs: 99999999999999", `policy: default.defaultDelayMs: must be at most a year`},
		{"negative delay", "default:\n  defaultDelayMs: -1", `policy: default.defaultDelayMs: must be >= 0, got -1`},
		{"read-only entry", "default:\n  readOnlyTools: [Read, 'a b']", `policy: default.readOnlyTools[1]: must be a tool name`},
		{"edit entry", "default:\n  editTools: ['']", `policy: default.editTools[0]: must be a tool name`},
		{"bad pattern", "default:\n  rules: {deny: [Bash, 'Bash(rm']}", `policy: default.rules.deny[1]: "Bash(rm": must end with ")"`},
		{"empty specifier", "default:\n  rules: {allow: ['Bash()']}", `policy: default.rules.allow[0]: "Bash()": empty specifier`},
		{"bad template", "default:\n  describe: {web_search: '{{.query'}", `policy: default.describe["web_search"]: template: web_search:1: unclosed action`},
		{"unknown template func", "default:\n  describe: {x: '{{shout .q}}'}", `function "shout" not defined`},
		{"template looping over a number", "default:\n  describe: {x: '{{range 1000000}}{{range 1000000}}{{end}}{{end}}x'}", `policy: default.describe["x"]: {{range}} over a number`},
		{"template looping over a length", "default:\n  describe: {x: '{{range len .q}}x{{end}}'}", `{{range}} over a number`},
		{"nested loops", "default:\n  describe: {x: '{{range .a}}{{range .b}}x{{end}}{{end}}'}", `loops may not nest`},
		{"recursive template", "default:\n  describe: {x: '{{define \"a\"}}{{template \"a\" .}}{{end}}{{template \"a\" .}}'}", `may not define templates`},
		{"describe tool name", "default:\n  describe: {'a b': x}", `policy: default.describe["a b"]: tool name must be`},
		{"match builtin", "default:\n  matchArgument: {Bash: cmd}", `policy: default.matchArgument["Bash"]: Bash is matched against its command argument`},
		{"match empty", "default:\n  matchArgument: {send: ''}", `policy: default.matchArgument["send"]: argument name is empty`},
		{"negative cost", "teams:\n  finance:\n    requireApprovalAboveCost: -1", `policy: teams.finance.requireApprovalAboveCost: must be >= 0, got -1`},
		{"infinite limit", "default:\n  dailyCostLimit: .inf", `policy: default.dailyCostLimit: must be a finite number, got +Inf`},
		{"NaN limit", "default:\n  dailyCostLimit: .nan", `policy: default.dailyCostLimit: must be a finite number, got NaN`},
		{"empty approver", "default:\n  approvers: ['']", `policy: default.approvers[0]: user id must be 1 to 256 bytes`},
		{"duplicate approver", "default:\n  approvers: [a, a]", `policy: default.approvers[1]: "a" is listed twice`},
		{"approver not among approvers", "default:\n  approvers: [a]\n  userIdToApprove: b",
			`policy: default.userIdToApprove: "b" is not among this scope's approvers ["a"]`},
		{"empty userIdToApprove", "default:\n  userIdToApprove: ''", `policy: default.userIdToApprove: user id must be 1 to 256 bytes`},
		{"attempts", "default:\n  maxExecutionAttempts: 0", `policy: default.maxExecutionAttempts: must be 1 to 100, got 0`},
		{"mode", "default:\n  permissionMode: yolo", `policy: default.permissionMode: must be default, acceptEdits, plan or bypassPermissions, got "yolo"`},
		{"empty team name", "teams:\n  '': {}", `policy: teams[""]: team name must be 1 to 256 bytes, got 0`},
		{"odd conversation id", "conversations:\n  'a.b':\n    defaultDelayMs: -3", `policy: conversations["a.b"].defaultDelayMs: must be >= 0, got -3`},
		{"merge key", "default: &d {defaultDelayMs: 1}\nteams:\n  x:\n    <<: *d", `policy: teams.x: merge keys (<<) are not supported`},
		{"non-string key", "default:\n  ? [a]\n  : 1", `policy: default: keys must be strings, got a list`},
		{"syntax", "default: [", `policy: malformed document: yaml:`},
		{"not a mapping", "- a\n- b", `policy: malformed document: want a mapping with default, teams or conversations, got a list`},
		{"two documents", "default: {}\n---\ndefault: {}", `policy: malformed document: want one YAML document, found more`},
		{"notify not a list", "default:\n  notify: {type: slack}", `policy: default.notify: must be a list, got a mapping`},
		{"notify entry not a mapping", "default:\n  notify: [slack]", `policy: default.notify[0]: must be a mapping, got "slack"`},
		{"notify unknown field", "default:\n  notify: [{type: slack, url: 'https://h/x', channel: '#ops'}]",
			`policy: default.notify[0].channel: unknown field`},
		{"notify type", "default:\n  notify: [{type: teams, url: 'https://h/x'}]",
			`policy: default.notify[0].type: must be webhook, slack, ntfy or email, got "teams"`},
		{"notify type missing", "default:\n  notify: [{url: 'https://h/x'}]", `policy: default.notify[0].type: must be webhook, slack, ntfy or email, got ""`},
		{"notify url missing", "default:\n  notify: [{type: slack}]", `policy: default.notify[0].url: required: an absolute http or https URL`},
		{"notify url scheme", "teams:\n  ops:\n    notify:\n      - {type: slack, url: 'https://hooks.slack.com/services/T/B/X'}\n      - {type: slack, url: 'ftp://h/x'}",
			`policy: teams.ops.notify[1].url: must be an absolute http or https URL, got scheme "ftp"`},
		{"notify url relative", "default:\n  notify: [{type: slack, url: '/services/T/B/X'}]",
			`policy: default.notify[0].url: must be an absolute http or https URL, got scheme ""`},
		{"notify url without host", "default:\n  notify: [{type: slack, url: 'https:///x'}]",
			`policy: default.notify[0].url: must be an absolute http or https URL with a host`},
		{"notify url not a url", "default:\n  notify: [{type: slack, url: 'http://a b/'}]", `policy: default.notify[0].url: not a URL`},
		{"ntfy topic missing", "default:\n  notify: [{type: ntfy, url: 'https://ntfy.sh'}]", `policy: default.notify[0].topic: required for an ntfy channel`},
		{"ntfy topic", "default:\n  notify: [{type: ntfy, url: 'https://ntfy.sh', topic: 'a/b'}]",
			`policy: default.notify[0].topic: must be 1 to 64 letters, digits, '-' or '_', got "a/b"`},
		{"topic on slack", "default:\n  notify: [{type: slack, url: 'https://h/x', topic: t}]", `policy: default.notify[0].topic: only ntfy channels have a topic`},
		{"webhook without secret", "default:\n  notify: [{type: webhook, url: 'https://h/x'}]", `policy: default.notify[0].secret: required for a webhook`},
		{"slack with secret", "default:\n  notify: [{type: slack, url: 'https://h/x', secret: s}]", `policy: default.notify[0].secret: a Slack incoming webhook takes no secret`},
		{"channel twice", "default:\n  notify: [{type: slack, url: 'https://h/x'}, {type: slack, url: 'https://h/x'}]",
			`policy: default.notify[1]: the same channel as default.notify[0]`},
		{"too many channels", "default:\n  notify:\n" + slackChannels(17), `policy: default.notify: at most 16 channels, got 17`},
		{"inbox url", "conversations:\n  c1:\n    inboxUrl: toolgate.example", `policy: conversations.c1.inboxUrl: must be an absolute http or https URL, got scheme ""`},
		{"inbox url query", "default:\n  inboxUrl: 'https://toolgate.example/?a=1'", `policy: default.inboxUrl: must not have a query`},
		{"unknown risk", "teams:\n  finance:\n    risk: {transfer_funds: severe}",
			`policy: teams.finance.risk["transfer_funds"]: must be high, medium or low, got "severe"`},
		{"risk pattern", "default:\n  risk: {'Bash(rm': high}", `policy: default.risk["Bash(rm"]: "Bash(rm": must end with ")"`},
		{"risk not a string", "default:\n  risk: {Bash: [high]}", `policy: default.risk["Bash"]: must be a string, got a list`},
		{"inbox url fragment", "default:\n  inboxUrl: 'https://toolgate.example/#/x'", `policy: default.inboxUrl: must not have a fragment`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.doc))
			require.Error(t, err)
			assert.ErrorIs(t, err, machine.ErrInvalid)
			assert.Contains(t, err.Error(), tt.want)
			var fe *FieldError
			assert.ErrorAs(t, err, &fe)
		})
	}
}

// slackChannels is a notify list of n distinct Slack channels.
func slackChannels(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "    - {type: slack, url: 'https://hooks.slack.com/services/T/B/%d'}\n", i)
	}
	return b.String()
}

func TestParse_ReportsEveryProblem(t *testing.T) {
	_, err := Parse([]byte("default:\n  defaultDelayMs: -1\nteams:\n  a:\n    maxExecutionAttempts: 0\n    colour: red\n"))
	require.Error(t, err)
	assert.ErrorIs(t, err, machine.ErrInvalid)
	// Decoding problems are reported before validation runs.
	assert.Equal(t, "policy: teams.a.colour: unknown field", err.Error())

	_, err = Parse([]byte("default:\n  defaultDelayMs: -1\nteams:\n  a:\n    maxExecutionAttempts: 0\n"))
	require.Error(t, err)
	assert.Equal(t, "policy: 2 problems:\n\tdefault.defaultDelayMs: must be >= 0, got -1\n\tteams.a.maxExecutionAttempts: must be 1 to 100, got 0", err.Error())
	var paths []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var fe *FieldError
		require.ErrorAs(t, e, &fe)
		paths = append(paths, fe.Path)
	}
	assert.Equal(t, []string{"default.defaultDelayMs", "teams.a.maxExecutionAttempts"}, paths)
}

func TestParse_AliasExpansionIsBounded(t *testing.T) {
	// One policy of 1,000 rules, named by 1,000 teams: a million nodes from
	// 20 kB of YAML.
	var b strings.Builder
	b.WriteString("default: &p\n  rules:\n    deny:\n")
	for range 1000 {
		b.WriteString("    - Bash\n")
	}
	b.WriteString("teams:\n")
	for i := range 1000 {
		fmt.Fprintf(&b, "  t%d: *p\n", i)
	}
	// Refused at the bound, not after building the million: how long that
	// takes is for a benchmark, not a timed assertion.
	_, err := Parse([]byte(b.String()))
	require.Error(t, err)
	assert.ErrorIs(t, err, machine.ErrInvalid)
	assert.Contains(t, err.Error(), "policy: malformed document: more than 100000 nodes")
}

// notifyDocument is the notify example of the design brief, with a team
// that replaces the list and one that mutes it.
const notifyDocument = `default:
  notify:
    - {type: webhook, url: "https://hooks.example/toolgate", secret: "s3cr3t"}
    - {type: slack, url: "https://hooks.slack.com/services/T/B/X"}
    - {type: ntfy, url: "https://ntfy.sh", topic: "team-approvals"}
  inboxUrl: "https://toolgate.example"
teams:
  finance:
    notify:
      - {type: slack, url: "https://hooks.slack.com/services/T/B/FIN"}
  quiet:
    notify: []
conversations:
  c1:
    inboxUrl: "https://staging.toolgate.example/inbox"
`

func TestParse_Notify(t *testing.T) {
	doc, err := Parse([]byte(notifyDocument))
	require.NoError(t, err)
	all := []Channel{
		{Type: ChannelWebhook, URL: "https://hooks.example/toolgate", Secret: "s3cr3t"},
		{Type: ChannelSlack, URL: "https://hooks.slack.com/services/T/B/X"},
		{Type: ChannelNtfy, URL: "https://ntfy.sh", Topic: "team-approvals"},
	}
	finance := []Channel{{Type: ChannelSlack, URL: "https://hooks.slack.com/services/T/B/FIN"}}

	def := doc.Resolve("", "")
	assert.Equal(t, all, def.Notify)
	assert.Equal(t, "https://toolgate.example", def.InboxURL)
	assert.Equal(t, "default", def.Sources["notify"])

	fin := doc.Resolve("finance", "")
	assert.Equal(t, finance, fin.Notify, "the team's list replaces the default's, it does not add to it")
	assert.Equal(t, "teams.finance", fin.Sources["notify"])
	assert.Equal(t, "https://toolgate.example", fin.InboxURL, "inherited")

	quiet := doc.Resolve("quiet", "")
	assert.Empty(t, quiet.Notify, "an explicit empty list mutes the team")
	assert.Equal(t, "teams.quiet", quiet.Sources["notify"])

	conv := doc.Resolve("finance", "c1")
	assert.Equal(t, finance, conv.Notify, "a conversation that does not set notify keeps its team's")
	assert.Equal(t, "https://staging.toolgate.example/inbox", conv.InboxURL)
	assert.Equal(t, "conversations.c1", conv.Sources["inboxUrl"])

	none := (&Document{}).Resolve("t", "c")
	assert.Nil(t, none.Notify, "built-in: no channels")
	assert.Equal(t, "", none.InboxURL)
	assert.Equal(t, BuiltIn, none.Sources["notify"])
	assert.Equal(t, BuiltIn, none.Sources["inboxUrl"])

	out, err := Marshal(doc)
	require.NoError(t, err)
	assert.Contains(t, string(out), "  quiet:\n    notify: []\n", "the mute survives Marshal")
	again, err := Parse(out)
	require.NoError(t, err, "%s", out)
	assert.Equal(t, doc, again)

	b, err := json.Marshal(doc)
	require.NoError(t, err)
	again, err = Parse(b)
	require.NoError(t, err, "%s", b)
	assert.Equal(t, doc, again)

	c := doc.Clone()
	c.Default.Notify[0].Secret = "changed"
	*c.Conversations["c1"].InboxURL = "changed"
	assert.Equal(t, "s3cr3t", doc.Default.Notify[0].Secret, "Clone copies the list")
	assert.Equal(t, "https://staging.toolgate.example/inbox", *doc.Conversations["c1"].InboxURL)
}

func TestParse_NotifyReportsEveryChannelProblem(t *testing.T) {
	_, err := Parse([]byte("default:\n  notify:\n    - {type: webhook, url: 'https://h/x', secret: s}\n    - {type: ntfy, url: 'mailto:a@b'}\n"))
	require.Error(t, err)
	assert.Equal(t, "policy: 2 problems:\n"+
		"\tdefault.notify[1].url: must be an absolute http or https URL, got scheme \"mailto\"\n"+
		"\tdefault.notify[1].topic: required for an ntfy channel", err.Error())
	assert.NotContains(t, err.Error(), "a@b", "URLs are not quoted back: a Slack one is a secret")
}

func TestMarshal_RoundTrip(t *testing.T) {
	for _, src := range []string{
		exampleDocument,
		`default:
  readOnlyTools: []
  editTools: [Write]
  approvers: []
  autoRejectOnTimeout: false
  defaultDelayMs: 0
  requiresApprovalTools: none
  permissionMode: acceptEdits
  disableBypassPermissionsMode: true
  matchArgument: {send_email: to}
  risk: {transfer_funds: high, "Bash(git push *)": medium}
  userIdToApprove: carol
  maxExecutionAttempts: 5
conversations:
  "odd id: with spaces":
    rules: {ask: ["mcp__github"]}
  plain: null
`,
	} {
		doc, err := Parse([]byte(src))
		require.NoError(t, err)
		out, err := Marshal(doc)
		require.NoError(t, err)
		again, err := Parse(out)
		require.NoError(t, err, "%s", out)
		assert.Equal(t, doc, again, "%s", out)
	}
}

func TestMarshal_KeepsExplicitEmptyList(t *testing.T) {
	doc, err := Parse([]byte("teams:\n  t:\n    readOnlyTools: []\n"))
	require.NoError(t, err)
	out, err := Marshal(doc)
	require.NoError(t, err)
	assert.Equal(t, "teams:\n  t:\n    readOnlyTools: []\n", string(out))
	assert.Empty(t, doc.Resolve("t", "").ReadOnlyTools, "the empty list overrides the built-in default")
}

func TestDocument_JSONRoundTrip(t *testing.T) {
	doc, err := Parse([]byte(exampleDocument))
	require.NoError(t, err)
	b, err := json.Marshal(doc)
	require.NoError(t, err)
	again, err := Parse(b)
	require.NoError(t, err, "%s", b)
	assert.Equal(t, doc, again)

	var direct Document
	require.NoError(t, json.Unmarshal(b, &direct))
	assert.Equal(t, doc, &direct)
}

func TestResolve_ScopeMerging(t *testing.T) {
	doc, err := Parse([]byte(`
default:
  requiresApprovalTools: [a]
  approvalTimeoutMs: 1000
  autoRejectOnTimeout: true
  defaultDelayMs: 10
  toolSpecificDelays: {a: 1, b: 2}
  readOnlyTools: [r]
  editTools: [e]
  rules: {deny: [d0], ask: [a0], allow: [l0]}
  describe: {a: "A {{.x}}", b: "B"}
  matchArgument: {a: x}
  requireApprovalAboveCost: 5
  dailyCostLimit: 50
  approvers: [u1]
  maxExecutionAttempts: 2
  permissionMode: acceptEdits
teams:
  t:
    requiresApprovalTools: all
    autoRejectOnTimeout: false
    toolSpecificDelays: {b: 20}
    readOnlyTools: []
    rules: {deny: [d1], allow: [l1]}
    describe: {b: "team B"}
    requireApprovalAboveCost: 0
    approvers: [u2, u3]
    userIdToApprove: u2
conversations:
  c:
    approvalTimeoutMs: 3000
    defaultDelayMs: 0
    toolSpecificDelays: {c: 3}
    rules: {deny: [d2]}
    matchArgument: {a: y}
    maxExecutionAttempts: 9
    permissionMode: plan
`))
	require.NoError(t, err)

	t.Run("default only", func(t *testing.T) {
		r := doc.Resolve("", "")
		assert.Equal(t, ToolSet{Tools: []string{"a"}}, r.RequiresApprovalTools)
		assert.Equal(t, time.Second, r.ApprovalTimeout)
		assert.Equal(t, 10*time.Millisecond, r.DefaultDelay)
		assert.Equal(t, []string{"r"}, r.ReadOnlyTools)
		assert.Equal(t, ModeAcceptEdits, r.PermissionMode)
	})
	t.Run("team over default", func(t *testing.T) {
		r := doc.Resolve("t", "")
		assert.Equal(t, ToolSet{All: true}, r.RequiresApprovalTools)
		assert.False(t, r.AutoRejectOnTimeout, "an explicit false overrides")
		assert.Equal(t, time.Second, r.ApprovalTimeout, "inherited")
		assert.Equal(t, map[string]time.Duration{"a": time.Millisecond, "b": 20 * time.Millisecond}, r.ToolSpecificDelays, "merged per tool")
		assert.Equal(t, "teams.t", r.Sources[`toolSpecificDelays["b"]`])
		assert.Equal(t, "default", r.Sources[`toolSpecificDelays["a"]`])
		assert.Empty(t, r.ReadOnlyTools, "an explicit empty list overrides")
		assert.NotNil(t, r.ReadOnlyTools)
		assert.Equal(t, []string{"e"}, r.EditTools)
		assert.Equal(t, map[string]string{"a": "A {{.x}}", "b": "team B"}, r.Describe)
		require.NotNil(t, r.RequireApprovalAboveCost)
		assert.Equal(t, 0.0, *r.RequireApprovalAboveCost, "an explicit zero overrides")
		assert.Equal(t, 50.0, *r.DailyCostLimit)
		assert.Equal(t, []string{"u2", "u3"}, r.Approvers)
		assert.Equal(t, "u2", r.UserIDToApprove)
		assert.Equal(t, 2, r.MaxExecutionAttempts)
		assert.Equal(t, []string{"d1", "d0"}, patterns(r.Rules.Deny), "narrower scope's rules first")
		assert.Equal(t, []string{"a0"}, patterns(r.Rules.Ask))
		assert.Equal(t, []string{"l1", "l0"}, patterns(r.Rules.Allow))
		assert.Equal(t, "teams.t", r.Rules.Deny[0].Scope)
	})
	t.Run("conversation over team over default", func(t *testing.T) {
		r := doc.Resolve("t", "c")
		assert.Equal(t, 3*time.Second, r.ApprovalTimeout)
		assert.Equal(t, time.Duration(0), r.DefaultDelay, "an explicit zero overrides")
		assert.Equal(t, map[string]time.Duration{"a": time.Millisecond, "b": 20 * time.Millisecond, "c": 3 * time.Millisecond}, r.ToolSpecificDelays)
		assert.Equal(t, map[string]string{"a": "y"}, r.MatchArgument)
		assert.Equal(t, 9, r.MaxExecutionAttempts)
		assert.Equal(t, ModePlan, r.PermissionMode)
		assert.Equal(t, ToolSet{All: true}, r.RequiresApprovalTools, "from the team")
		assert.Equal(t, []string{"d2", "d1", "d0"}, patterns(r.Rules.Deny))
		assert.Equal(t, "conversations.c", r.Sources["permissionMode"])
		assert.Equal(t, "teams.t", r.Sources["requiresApprovalTools"])
		assert.Equal(t, "default", r.Sources["editTools"])
	})
	t.Run("conversation without its team", func(t *testing.T) {
		r := doc.Resolve("other", "c")
		assert.Equal(t, ToolSet{Tools: []string{"a"}}, r.RequiresApprovalTools)
		assert.Equal(t, []string{"d2", "d0"}, patterns(r.Rules.Deny))
	})
}

func patterns(rules []Rule) []string {
	var out []string
	for _, r := range rules {
		out = append(out, r.Pattern.String())
	}
	return out
}

func TestDocument_CloneIsDeep(t *testing.T) {
	doc, err := Parse([]byte(exampleDocument))
	require.NoError(t, err)
	c := doc.Clone()
	require.Equal(t, doc, c)
	c.Default.ReadOnlyTools[0] = "changed"
	c.Default.ToolSpecificDelays["slow_report"] = 1
	c.Teams["finance"].Approvers[0] = "mallory"
	*c.Teams["finance"].DailyCostLimit = 1
	assert.Equal(t, "read_file", doc.Default.ReadOnlyTools[0])
	assert.Equal(t, int64(2000), doc.Default.ToolSpecificDelays["slow_report"])
	assert.Equal(t, "alice", doc.Teams["finance"].Approvers[0])
	assert.Equal(t, 1000.0, *doc.Teams["finance"].DailyCostLimit)
}

func TestFieldError_Is(t *testing.T) {
	err := error(&FieldError{Path: "x", Msg: "bad"})
	assert.True(t, errors.Is(err, machine.ErrInvalid))
	assert.Equal(t, "policy: x: bad", err.Error())
	assert.Equal(t, "policy: bad", (&FieldError{Msg: "bad"}).Error())
}

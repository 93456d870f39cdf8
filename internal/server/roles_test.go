package server

import (
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRoles_FlagNamesTheRoles(t *testing.T) {
	t.Parallel()
	assert.Equal(t, []string{"relay", "intake", "timer", "executor", "notifier", "reviewer", "analytics", "http"}, RoleNames())

	for _, tc := range []struct {
		flag string
		want []string // Resolve, in the table's order
		err  string
	}{
		{flag: "all", want: RoleNames()},
		{flag: "http, relay,http", want: []string{"relay", "http"}},
		{flag: "timer", want: []string{"timer"}},
		{flag: "", err: "no role given"},
		{flag: "all,relay", err: `"all" stands alone`},
		{flag: "relay,janitor", err: `unknown role "janitor": want all, or any of relay,intake,timer,executor,notifier,reviewer,analytics,http`},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			var r Roles
			err := r.Set(tc.flag)
			if tc.err != "" {
				require.EqualError(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, r.Resolve())
		})
	}
	assert.Equal(t, RoleNames(), Roles(nil).Resolve(), "none given means all")
}

// TestRoles_TableSaysWhatEachRoleNeeds walks the table: what each role
// implies for the process that runs it.
func TestRoles_TableSaysWhatEachRoleNeeds(t *testing.T) {
	t.Parallel()
	type needs struct {
		evaluation, report, events, requestAPI bool
		views                                  []callsView
	}
	want := map[string]needs{
		"relay":     {},
		"intake":    {evaluation: true, report: true, requestAPI: true, views: []callsView{retiredView, indexView, workView}},
		"timer":     {views: []callsView{deadlinesView, indexView}},
		"executor":  {},
		"notifier":  {},
		"reviewer":  {},
		"analytics": {events: true, views: []callsView{pendingView}},
		"http":      {evaluation: true, report: true, events: true, views: []callsView{retiredView, indexView}},
	}
	require.ElementsMatch(t, RoleNames(), keysOf(want), "every role, and only those, is here")
	kept := map[callsView]bool{}
	for _, name := range RoleNames() {
		rs := Roles{name}.rows()
		require.Len(t, rs, 1)
		got := needs{
			evaluation: rs.needsEvaluation(), report: rs.needsReport(),
			events: rs.needsEvents(), requestAPI: rs.needsRequestAPI(),
		}
		for v := range callsViews {
			if rs.needsView(v) {
				got.views = append(got.views, v)
				kept[v] = true
			}
		}
		assert.Equal(t, want[name], got, name)
		assert.NotNil(t, rs[0].run, name)
	}
	for v := range callsViews {
		assert.True(t, kept[v], "view %d is kept by a role", v)
	}
}

func keysOf[V any](m map[string]V) []string {
	return slices.Collect(maps.Keys(m))
}

func TestRoles_HTTPSettingsAreCheckedOnlyWithTheHTTPRole(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.HTTP = "localhost"
	cfg.Roles = Roles{"relay", "intake"}
	assert.NoError(t, cfg.Validate(), "no http role: --http is not read")
	cfg.Roles = Roles{"relay", "http"}
	assert.ErrorContains(t, cfg.Validate(), `--http "localhost"`)
	cfg.Roles = Roles{"all"}
	assert.ErrorContains(t, cfg.Validate(), `--http "localhost"`)

	cfg.HTTP = "127.0.0.1:8080"
	cfg.AllowedHosts = Hosts{"toolgate.example.com:8080"}
	assert.ErrorContains(t, cfg.Validate(), "--allowed-hosts: ")
	cfg.Roles = Roles{"timer"}
	assert.NoError(t, cfg.Validate())
}

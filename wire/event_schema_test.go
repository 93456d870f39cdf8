package wire_test

import (
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// schemaObject is the part of a JSON Schema the test reads.
type schemaObject struct {
	Required   []string                   `json:"required"`
	Properties map[string]json.RawMessage `json:"properties"`
	Enum       []string                   `json:"enum"`
	Defs       map[string]json.RawMessage `json:"$defs"`
}

func parseSchema(t *testing.T, raw []byte) schemaObject {
	t.Helper()
	var s schemaObject
	require.NoError(t, json.Unmarshal(raw, &s))
	return s
}

// jsonFields returns the JSON names of a struct's fields, and those the
// encoder always writes (no omitempty).
func jsonFields(typ reflect.Type) (all, always []string) {
	for f := range typ.Fields() {
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		all = append(all, name)
		if !strings.Contains(opts, "omitempty") {
			always = append(always, name)
		}
	}
	slices.Sort(all)
	slices.Sort(always)
	return all, always
}

func keys(m map[string]json.RawMessage) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// The schema documents every field the envelope carries, and requires
// exactly those always sent: a field added to the Go types without a word
// in the contract fails here.
func TestEventSchema_DescribesEveryField(t *testing.T) {
	t.Parallel()
	root := parseSchema(t, wire.EventSchema)
	entry := parseSchema(t, root.Defs["entry"])
	transition := parseSchema(t, root.Defs["transition"])
	for _, c := range []struct {
		name   string
		schema schemaObject
		typ    any
	}{
		{"event", root, wire.Event{}},
		{"entry", entry, machine.Entry{}},
		{"lease", parseSchema(t, entry.Properties["lease"]), machine.Lease{}},
		{"lastTransition", transition, machine.Transition{}},
		{"edit", parseSchema(t, transition.Properties["edit"]), machine.Edit{}},
	} {
		all, always := jsonFields(reflect.TypeOf(c.typ))
		assert.Equal(t, all, keys(c.schema.Properties), "%s: the schema's properties", c.name)
		required := slices.Clone(c.schema.Required)
		slices.Sort(required)
		assert.Equal(t, always, required, "%s: required are the fields always sent", c.name)
	}

	enum := func(raw json.RawMessage) []string { return parseSchema(t, raw).Enum }
	var states, events, scopes []string
	for _, s := range machine.States {
		states = append(states, string(s))
	}
	for _, ev := range machine.Events() {
		if !ev.Silent() {
			events = append(events, string(ev))
		}
	}
	for _, s := range []machine.Scope{machine.ScopeOnce, machine.ScopeTask, machine.ScopeSession, machine.ScopeAlways} {
		scopes = append(scopes, string(s))
	}
	assert.Equal(t, states, enum(root.Defs["state"]))
	assert.Equal(t, events, enum(root.Properties["event"]))
	assert.Equal(t, wire.EventSubjects(), enum(root.Properties["type"]))
	assert.Equal(t, scopes, enum(entry.Properties["decisionScope"]))

	var v struct {
		Const int `json:"const"`
	}
	require.NoError(t, json.Unmarshal(root.Properties["v"], &v))
	assert.Equal(t, wire.EventVersion, v.Const)
}

// docs/events.md is the contract's prose: it names every subject and
// every field of the envelope.
func TestEventSchema_DocumentedInEventsMD(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/events.md")
	require.NoError(t, err)
	for _, s := range wire.EventSubjects() {
		assert.True(t, strings.Contains(string(doc), "| `"+s+"` |"), "the subjects table has no row for %s", s)
	}
	all, _ := jsonFields(reflect.TypeOf(wire.Event{}))
	for _, f := range all {
		assert.True(t, strings.Contains(string(doc), "| `"+f+"` |"), "the envelope's table has no row for %s", f)
	}
}

package httpapi_test

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/analytics"
	"github.com/toolgate/toolgate/internal/httpapi"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// loadOpenAPI loads api/openapi.json with kin-openapi and validates it.
func loadOpenAPI(t *testing.T, data []byte) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(data)
	require.NoError(t, err)
	require.NoError(t, doc.Validate(t.Context()), "kin-openapi validates the document")
	return doc
}

func readOpenAPI(t *testing.T) *openapi3.T {
	t.Helper()
	data, err := os.ReadFile("openapi.json")
	require.NoError(t, err)
	return loadOpenAPI(t, data)
}

var camelCase = regexp.MustCompile(`^[a-z]+(?:[A-Z][a-z0-9]*|API)*$`)

// TestOpenAPI_OperationsAreNamedAndTagged: what a generator names its
// methods by (operationId, one camelCase verb phrase each, unique) and
// groups them by (tags the document declares).
func TestOpenAPI_OperationsAreNamedAndTagged(t *testing.T) {
	t.Parallel()
	doc := readOpenAPI(t)
	declared := map[string]bool{}
	for _, tag := range doc.Tags {
		declared[tag.Name] = true
		assert.NotEmpty(t, tag.Description, "tag %s", tag.Name)
	}
	seen := map[string]string{}
	used := map[string]bool{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			where := method + " " + path
			if assert.Regexp(t, camelCase, op.OperationID, "%s: operationId", where) {
				if other, dup := seen[op.OperationID]; dup {
					t.Errorf("operationId %s names both %s and %s", op.OperationID, other, where)
				}
				seen[op.OperationID] = where
			}
			if assert.NotEmpty(t, op.Tags, "%s: tags", where) {
				for _, tag := range op.Tags {
					assert.True(t, declared[tag], "%s: tag %q is not among the document's tags", where, tag)
					used[tag] = true
				}
			}
			assert.NotEmpty(t, op.Summary, "%s: summary", where)
			assert.NotNil(t, op.Responses.Default(), "%s: a default (error) response", where)
		}
	}
	for tag := range declared {
		assert.True(t, used[tag], "tag %s tags no operation", tag)
	}
}

// schemaTypes are the Go types the document's object schemas describe.
// A response's schema lists every field the type marshals and requires
// exactly those it always sends (no omitempty); a request's lists only
// fields the server takes.
var (
	responseSchemas = map[string]reflect.Type{
		"Entry":                   reflect.TypeFor[machine.Entry](),
		"Transition":              reflect.TypeFor[machine.Transition](),
		"Edit":                    reflect.TypeFor[machine.Edit](),
		"Lease":                   reflect.TypeFor[machine.Lease](),
		"Identity":                reflect.TypeFor[machine.Identity](),
		"Quorum":                  reflect.TypeFor[machine.Quorum](),
		"Vote":                    reflect.TypeFor[machine.Vote](),
		"Review":                  reflect.TypeFor[machine.Review](),
		"Escalation":              reflect.TypeFor[machine.Escalation](),
		"Receipt":                 reflect.TypeFor[machine.Receipt](),
		"ReceiptChain":            reflect.TypeFor[wire.ReceiptChain](),
		"RevealRequest":           reflect.TypeFor[wire.RevealRequest](),
		"RerunRequest":            reflect.TypeFor[wire.RerunRequest](),
		"RevealReply":             reflect.TypeFor[wire.RevealReply](),
		"Reveal":                  reflect.TypeFor[wire.Reveal](),
		"ReceiptKeys":             reflect.TypeFor[wire.ReceiptKeys](),
		"HistoryItem":             reflect.TypeFor[wire.HistoryItem](),
		"Page":                    reflect.TypeFor[wire.ListPage](),
		"Grant":                   reflect.TypeFor[wire.Grant](),
		"GrantPreview":            reflect.TypeFor[wire.GrantPreview](),
		"Budget":                  reflect.TypeFor[wire.Budget](),
		"BudgetsReply":            reflect.TypeFor[wire.BudgetsReply](),
		"RateLimitsReply":         reflect.TypeFor[wire.RateLimitsReply](),
		"RateLimit":               reflect.TypeFor[wire.RateLimit](),
		"RateCount":               reflect.TypeFor[wire.RateCount](),
		"DecideMatchingReply":     reflect.TypeFor[wire.DecideMatchingReply](),
		"MatchedCall":             reflect.TypeFor[wire.MatchedCall](),
		"CancelConversationReply": reflect.TypeFor[wire.CancelConversationReply](),
		"Me":                      reflect.TypeFor[httpapi.Me](),
		"ErrorBody":               reflect.TypeFor[httpapi.ErrorBody](),
		"ErrorDetail":             reflect.TypeFor[wire.ErrorDetail](),
		"Event":                   reflect.TypeFor[wire.Event](),
		"AnalyticsReport":         reflect.TypeFor[wire.AnalyticsReport](),
		"ToolReport":              reflect.TypeFor[wire.ToolReport](),
		"ApproverReport":          reflect.TypeFor[wire.ApproverReport](),
		"ReviewerReport":          reflect.TypeFor[wire.ReviewerReport](),
		"Recommendation":          reflect.TypeFor[wire.Recommendation](),
		"Evidence":                reflect.TypeFor[wire.Evidence](),
		"DurationSummary":         reflect.TypeFor[wire.DurationSummary](),
		"NameCount":               reflect.TypeFor[wire.NameCount](),
		"Series":                  reflect.TypeFor[wire.AnalyticsSeries](),
		"SeriesPoint":             reflect.TypeFor[wire.SeriesPoint](),
		"PolicyDryRunReply":       reflect.TypeFor[wire.PolicyDryRunReply](),
		"VerdictCount":            reflect.TypeFor[wire.VerdictCount](),
		"DryRunGroup":             reflect.TypeFor[wire.DryRunGroup](),
		"DryRunExample":           reflect.TypeFor[wire.DryRunExample](),
		"DryRunBudget":            reflect.TypeFor[wire.DryRunBudget](),
		"DryRunSpend":             reflect.TypeFor[wire.DryRunSpend](),
		"DryRunDay":               reflect.TypeFor[wire.DryRunDay](),
		"DryRunRecorded":          reflect.TypeFor[wire.DryRunRecorded](),
		"PolicyExplainReply":      reflect.TypeFor[wire.PolicyExplainReply](),
		"ExplainedRule":           reflect.TypeFor[wire.ExplainedRule](),
		"ExplainedFlow":           reflect.TypeFor[wire.ExplainedFlow](),
		"FlowCall":                reflect.TypeFor[wire.FlowCall](),
		"PolicyDocument":          reflect.TypeFor[wire.PolicyDocument](),
		"PolicyShadowCleared":     reflect.TypeFor[wire.PolicyShadowCleared](),
		"PolicyShadowReport":      reflect.TypeFor[wire.PolicyShadowReport](),
		"AccessDecision":          reflect.TypeFor[wire.AccessDecision](),
		"AccessEvaluationsReply":  reflect.TypeFor[wire.AccessEvaluationsReply](),
		"AccessContext":           reflect.TypeFor[wire.AccessContext](),
		"AccessBinding":           reflect.TypeFor[wire.AccessBinding](),
		"AccessFollow":            reflect.TypeFor[wire.AccessFollow](),
		"AccessError":             reflect.TypeFor[wire.AccessError](),
		"AuthZENConfiguration":    reflect.TypeFor[wire.AuthZENConfiguration](),
	}
	requestSchemas = map[string]reflect.Type{
		"Call":                       reflect.TypeFor[machine.Call](),
		"DecisionRequest":            reflect.TypeFor[wire.DecideRequest](),
		"RespondRequest":             reflect.TypeFor[wire.RespondRequest](),
		"CancelRequest":              reflect.TypeFor[wire.CancelRequest](),
		"RunReport":                  reflect.TypeFor[wire.ReportRequest](),
		"DecideMatchingRequest":      reflect.TypeFor[wire.DecideMatchingRequest](),
		"PolicyDryRunRequest":        reflect.TypeFor[wire.PolicyDryRunRequest](),
		"PolicyExplainRequest":       reflect.TypeFor[wire.PolicyExplainRequest](),
		"PolicyShadowPromoteRequest": reflect.TypeFor[wire.PolicyShadowPromoteRequest](),
		"Empty":                      reflect.TypeFor[struct{}](),
		"AccessEvaluationRequest":    reflect.TypeFor[wire.AccessEvaluationRequest](),
		"AccessEvaluationsRequest":   reflect.TypeFor[wire.AccessEvaluationsRequest](),
		"AccessEvaluationsOptions":   reflect.TypeFor[wire.AccessEvaluationsOptions](),
		"AuthZENSubject":             reflect.TypeFor[wire.AuthZENSubject](),
		"AuthZENAction":              reflect.TypeFor[wire.AuthZENAction](),
		"AuthZENResource":            reflect.TypeFor[wire.AuthZENResource](),
		"AuthZENCallProperties":      reflect.TypeFor[wire.AuthZENCallProperties](),
	}
	// enumSchemas are the document's string enums and the values the
	// code has.
	enumSchemas = map[string][]string{
		"State":           strs(machine.States),
		"TransitionEvent": strs(machine.Events()),
		"Decider":         strs(machine.Deciders),
		"Role":            strs(wire.Roles),
		"Scope":           strs([]machine.Scope{machine.ScopeOnce, machine.ScopeTask, machine.ScopeSession, machine.ScopeAlways}),
		"PermissionMode":  {"default", "acceptEdits", "plan", "bypassPermissions"},
	}
	// otherSchemas are the rest: {"status": ...} of /healthz and /readyz.
	otherSchemas = []string{"Status"}
)

func strs[S ~string](xs []S) []string {
	var out []string
	for _, x := range xs {
		out = append(out, string(x))
	}
	return out
}

// jsonField is a field as encoding/json marshals it.
type jsonField struct {
	name      string
	omitempty bool
	typ       reflect.Type
}

// jsonFields lists what encoding/json marshals of a struct type, embedded
// structs' fields included.
func jsonFields(t reflect.Type) []jsonField {
	var out []jsonField
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		if name == "" {
			name = f.Name
		}
		omit := slices.Contains(strings.Split(opts, ","), "omitempty") || slices.Contains(strings.Split(opts, ","), "omitzero")
		out = append(out, jsonField{name: name, omitempty: omit, typ: f.Type})
	}
	return out
}

// TestOpenAPI_SchemasMatchTheGoTypes holds the document to the types the
// server marshals: every field documented with its JSON type (int64 and
// uint64 as integer/int64, which generators map to a 64-bit integer: epoch
// milliseconds and sequences overflow an int32), every field the server
// always sends required and no other, and every enum the code's values.
func TestOpenAPI_SchemasMatchTheGoTypes(t *testing.T) {
	t.Parallel()
	doc := readOpenAPI(t)
	schemas := doc.Components.Schemas
	byType := map[reflect.Type]string{}
	for name, typ := range responseSchemas {
		byType[typ] = name
	}
	for name, typ := range requestSchemas {
		byType[typ] = name
	}
	for name := range schemas {
		_, resp := responseSchemas[name]
		_, req := requestSchemas[name]
		_, enum := enumSchemas[name]
		assert.True(t, resp || req || enum || slices.Contains(otherSchemas, name), "schema %s is not checked against a Go type", name)
	}

	for name, typ := range responseSchemas {
		t.Run(name, func(t *testing.T) {
			s := schemas[name]
			require.NotNil(t, s, "no schema %s", name)
			var always []string
			documented := map[string]bool{}
			for _, f := range jsonFields(typ) {
				documented[f.name] = true
				if !f.omitempty {
					always = append(always, f.name)
				}
				p := s.Value.Properties[f.name]
				if assert.NotNil(t, p, "%s.%s is sent but not documented", name, f.name) {
					checkSchemaType(t, name+"."+f.name, f.typ, p, byType)
				}
			}
			for p := range s.Value.Properties {
				assert.True(t, documented[p], "%s.%s is documented but never sent", name, p)
			}
			sort.Strings(always)
			required := slices.Clone(s.Value.Required)
			sort.Strings(required)
			assert.Equal(t, always, required, "%s: required lists exactly the fields always sent", name)
		})
	}
	for name, typ := range requestSchemas {
		t.Run(name, func(t *testing.T) {
			s := schemas[name]
			require.NotNil(t, s, "no schema %s", name)
			fields := map[string]jsonField{}
			for _, f := range jsonFields(typ) {
				fields[f.name] = f
			}
			for p, ps := range s.Value.Properties {
				f, ok := fields[p]
				if assert.True(t, ok, "%s.%s is documented but refused as an unknown field", name, p) {
					checkSchemaType(t, name+"."+p, f.typ, ps, byType)
				}
			}
			for _, r := range s.Value.Required {
				assert.Contains(t, s.Value.Properties, r, "%s requires an undocumented %s", name, r)
			}
		})
	}
	for name, values := range enumSchemas {
		var got []string
		for _, v := range schemas[name].Value.Enum {
			got = append(got, fmt.Sprint(v))
		}
		assert.ElementsMatch(t, values, got, "the enum %s", name)
	}
	var kinds []string
	for _, v := range schemas["Recommendation"].Value.Properties["kind"].Value.Enum {
		kinds = append(kinds, fmt.Sprint(v))
	}
	assert.ElementsMatch(t, []string{analytics.KindAllowRule, analytics.KindReviewRejections, analytics.KindApprovalTimeout}, kinds)
}

var rawJSON = reflect.TypeFor[json.RawMessage]()

// checkSchemaType checks that s describes what encoding/json makes of a
// value of type typ.
func checkSchemaType(t *testing.T, where string, typ reflect.Type, s *openapi3.SchemaRef, byType map[reflect.Type]string) {
	t.Helper()
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	if typ == rawJSON {
		return // any JSON
	}
	if name, ok := byType[typ]; ok {
		assert.Equal(t, "#/components/schemas/"+name, s.Ref, "%s: a %s", where, typ)
		return
	}
	v := s.Value
	is := func(want string) bool {
		return assert.True(t, v.Type.Is(want), "%s (%s): documented as %v, want %s", where, typ, v.Type, want)
	}
	switch typ.Kind() {
	case reflect.String:
		is(openapi3.TypeString)
	case reflect.Bool:
		is(openapi3.TypeBoolean)
	case reflect.Int64, reflect.Uint64:
		if is(openapi3.TypeInteger) {
			assert.Equal(t, "int64", v.Format, "%s (%s): format", where, typ)
		}
	case reflect.Int, reflect.Int32, reflect.Uint32:
		if is(openapi3.TypeInteger) {
			assert.NotEqual(t, "int32", v.Format, "%s (%s): format", where, typ)
		}
	case reflect.Float64, reflect.Float32:
		is(openapi3.TypeNumber)
	case reflect.Slice, reflect.Array:
		if is(openapi3.TypeArray) {
			checkSchemaType(t, where+"[]", typ.Elem(), v.Items, byType)
		}
	case reflect.Map:
		is(openapi3.TypeObject)
	case reflect.Struct:
		if is(openapi3.TypeObject) {
			for _, f := range jsonFields(typ) {
				p := v.Properties[f.name]
				if assert.NotNil(t, p, "%s.%s is sent but not documented", where, f.name) {
					checkSchemaType(t, where+"."+f.name, f.typ, p, byType)
				}
			}
		}
	default:
		t.Errorf("%s: no rule for %s", where, typ)
	}
}

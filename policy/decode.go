package policy

import (
	"fmt"
	"math"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The decoder walks the parsed YAML tree itself instead of leaving it to
// yaml.Decoder.KnownFields: both are strict, but yaml's errors name Go types
// ("field colour not found in type policy.Policy") and line numbers, while a
// policy author needs the path they wrote (teams.finance.colour) and the
// value they wrote there. The Go types stay the one schema: fields are found
// by their yaml tags, so Marshal writes what this reads.

// maxNodes bounds the work of one document. Aliases let a small document
// name a large node many times over; decoding is linear in the nodes
// visited, so a budget keeps a hostile document from costing quadratic time.
const maxNodes = 100_000

// maxErrors bounds the errors kept: a list of a million bad entries is one
// mistake, reported enough times.
const maxErrors = 50

type decoder struct {
	budget int
	errs   []error
}

func newDecoder() *decoder { return &decoder{budget: maxNodes} }

func (d *decoder) errorf(path *fieldPath, format string, args ...any) {
	if len(d.errs) >= maxErrors {
		return
	}
	if p := path.String(); p != "" {
		d.errs = append(d.errs, fieldErrorf(p, format, args...))
	} else {
		d.errs = append(d.errs, malformed(format, args...)) // nothing to name at the top
	}
}

var (
	policyPtrType = reflect.TypeFor[*Policy]()
	toolSetType   = reflect.TypeFor[ToolSet]()
	namesType     = reflect.TypeFor[Names]()
	channelsType  = reflect.TypeFor[Channels]()
	tiersType     = reflect.TypeFor[Tiers]()
	reviewersType = reflect.TypeFor[Reviewers]()
)

func (d *decoder) document(root *yaml.Node, doc *Document) {
	n := root
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) != 1 {
			d.errs = append(d.errs, malformed("empty YAML document"))
			return
		}
		n = n.Content[0]
	}
	if n = d.deref(n); n == nil {
		return
	}
	if isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		d.errs = append(d.errs, malformed("want a mapping with default, teams or conversations, got %s", nodeText(n)))
		return
	}
	d.value(nil, n, reflect.ValueOf(doc).Elem())
}

// deref follows aliases and charges the budget for the node reached. It
// returns nil once the budget is spent.
func (d *decoder) deref(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	if d.budget--; d.budget < 0 {
		if d.budget == -1 {
			d.errs = append(d.errs, malformed("more than %d nodes (aliases expanding too far?)", maxNodes))
		}
		return nil
	}
	if n.Kind == yaml.AliasNode {
		d.errs = append(d.errs, malformed("alias %q leads nowhere", n.Value))
		return nil
	}
	return n
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" }

// value decodes n into v, whose field path is path. A null leaves v unset.
func (d *decoder) value(path *fieldPath, n *yaml.Node, v reflect.Value) {
	if n = d.deref(n); n == nil {
		return
	}
	if isNull(n) {
		v.SetZero()
		return
	}
	t := v.Type()
	if t == toolSetType {
		d.toolSet(path, n, v.Addr().Interface().(*ToolSet))
		return
	}
	switch t.Kind() {
	case reflect.Pointer:
		p := reflect.New(t.Elem())
		d.value(path, n, p.Elem())
		v.Set(p)
	case reflect.Struct:
		d.structure(path, n, v)
	case reflect.Map:
		d.mapping(path, n, v)
	case reflect.Slice:
		d.sequence(path, n, v)
	default:
		d.scalar(path, n, v)
	}
}

func (d *decoder) structure(path *fieldPath, n *yaml.Node, v reflect.Value) {
	if n.Kind != yaml.MappingNode {
		d.errorf(path, "must be a mapping, got %s", nodeText(n))
		return
	}
	t := v.Type()
	fields := map[string]int{}
	var names []string
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		fields[name] = i
		names = append(names, name)
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, ok := d.key(path, n.Content[i])
		if !ok {
			continue
		}
		p := &fieldPath{up: path, key: key, kind: pathField}
		if seen[key] {
			d.errorf(p, "set twice")
			continue
		}
		seen[key] = true
		f, ok := fields[key]
		if !ok {
			d.errorf(p, "unknown field%s", suggest(key, names))
			continue
		}
		d.value(p, n.Content[i+1], v.Field(f))
	}
}

func (d *decoder) mapping(path *fieldPath, n *yaml.Node, v reflect.Value) {
	if n.Kind != yaml.MappingNode {
		d.errorf(path, "must be a mapping, got %s", nodeText(n))
		return
	}
	if len(n.Content) == 0 {
		return // an empty map sets nothing; nil keeps Marshal and Parse in step
	}
	t := v.Type()
	kind := pathKey
	if t.Elem() == policyPtrType {
		kind = pathField // teams.finance reads better than teams["finance"]
	}
	m := reflect.MakeMapWithSize(t, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, ok := d.key(path, n.Content[i])
		if !ok {
			continue
		}
		p := &fieldPath{up: path, key: key, kind: kind}
		k := reflect.ValueOf(key).Convert(t.Key())
		if m.MapIndex(k).IsValid() {
			d.errorf(p, "set twice")
			continue
		}
		e := reflect.New(t.Elem()).Elem()
		d.value(p, n.Content[i+1], e)
		m.SetMapIndex(k, e)
	}
	v.Set(m)
}

func (d *decoder) key(path *fieldPath, k *yaml.Node) (string, bool) {
	if k = d.deref(k); k == nil {
		return "", false
	}
	switch {
	case k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge":
		d.errorf(path, "merge keys (<<) are not supported; scopes already inherit from the default")
		return "", false
	case k.Kind != yaml.ScalarNode:
		d.errorf(path, "keys must be strings, got %s", nodeText(k))
		return "", false
	}
	return k.Value, true
}

func (d *decoder) sequence(path *fieldPath, n *yaml.Node, v reflect.Value) {
	if n.Kind != yaml.SequenceNode {
		d.errorf(path, "must be a list, got %s", nodeText(n))
		return
	}
	t := v.Type()
	if len(n.Content) == 0 {
		if t == namesType || t == channelsType || t == tiersType || t == reviewersType {
			v.Set(reflect.MakeSlice(t, 0, 0)) // an explicit empty list overrides
		}
		return
	}
	s := reflect.MakeSlice(t, len(n.Content), len(n.Content))
	for i, e := range n.Content {
		d.value(&fieldPath{up: path, i: i, kind: pathIndex}, e, s.Index(i))
	}
	v.Set(s)
}

func (d *decoder) scalar(path *fieldPath, n *yaml.Node, v reflect.Value) {
	want := map[reflect.Kind]string{
		reflect.String: "a string", reflect.Bool: "true or false",
		reflect.Int: "an integer", reflect.Int64: "an integer", reflect.Float64: "a number",
	}[v.Kind()]
	if n.Kind != yaml.ScalarNode {
		d.errorf(path, "must be %s, got %s", want, nodeText(n))
		return
	}
	if v.Kind() == reflect.String && n.ShortTag() == "!!str" {
		v.SetString(n.Value) // the common case, without yaml's reflection
		return
	}
	if k := v.Kind(); (k == reflect.Int || k == reflect.Int64) && n.ShortTag() == "!!float" {
		// yaml would truncate 1.5 to 1; a whole 3e5 may stand.
		var f float64
		if err := n.Decode(&f); err != nil || f != math.Trunc(f) {
			d.errorf(path, "must be %s, got %s", want, nodeText(n))
			return
		}
	}
	p := reflect.New(v.Type())
	if err := n.Decode(p.Interface()); err != nil {
		d.errorf(path, "must be %s, got %s", want, nodeText(n))
		return
	}
	v.Set(p.Elem())
}

func (d *decoder) toolSet(path *fieldPath, n *yaml.Node, t *ToolSet) {
	if n = d.deref(n); n == nil {
		return
	}
	switch {
	case n.Kind == yaml.ScalarNode && n.Value == "all":
		*t = ToolSet{All: true}
		return
	case n.Kind == yaml.ScalarNode && n.Value == "none":
		*t = ToolSet{}
		return
	case n.Kind == yaml.SequenceNode:
		var tools []string
		d.sequence(path, n, reflect.ValueOf(&tools).Elem())
		*t = ToolSet{Tools: tools}
		return
	}
	d.errorf(path, `must be a list of tools, "all" or "none", got %s`, nodeText(n))
}

// nodeText shows a node the way the author wrote it, briefly.
func nodeText(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		v := n.Value
		if len(v) > 40 {
			v = v[:40] + "…"
		}
		return fmt.Sprintf("%q", v)
	}
	return "nothing"
}

// suggest names the field the author probably meant, by case or a small
// edit distance, since "requireApprovalTools" for "requiresApprovalTools"
// is the typical mistake.
func suggest(key string, names []string) string {
	best, bestDist := "", 4
	for _, n := range names {
		if strings.EqualFold(n, key) {
			return fmt.Sprintf(" (did you mean %s?)", n)
		}
		if dist := editDistance(strings.ToLower(key), strings.ToLower(n)); dist < bestDist {
			best, bestDist = n, dist
		}
	}
	if best != "" {
		return fmt.Sprintf(" (did you mean %s?)", best)
	}
	return ""
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// fieldPath is where the decoder is in the document. It is built as a
// chain and spelled out only for an error, as most nodes have none.
type fieldPath struct {
	up   *fieldPath
	key  string
	i    int
	kind pathKind
}

type pathKind int

const (
	pathField pathKind = iota // .name: a struct field, a team or a conversation
	pathKey                   // ["key"]: a tool in a per-tool map
	pathIndex                 // [i]
)

func (p *fieldPath) String() string {
	if p == nil {
		return ""
	}
	base := p.up.String()
	switch p.kind {
	case pathField:
		return child(base, p.key)
	case pathKey:
		return index(base, p.key)
	}
	return fmt.Sprintf("%s[%d]", base, p.i)
}

package mcpgateway

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// pathArguments are the names by which an input schema says what a tool
// acts on.
var pathArguments = []string{"path", "file_path", "uri", "url"}

// schemaArgument names the argument a tool's input schema marks as what
// the tool acts on: a string property named path, file_path, uri or url,
// else the one string property of format uri; "" when none does, or more
// than one could be meant.
func schemaArgument(schema any) string {
	raw, err := json.Marshal(schema)
	if err != nil {
		return ""
	}
	var s struct {
		Properties map[string]struct {
			Type   any    `json:"type"`
			Format string `json:"format"`
		} `json:"properties"`
	}
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	var named, uris []string
	for name, p := range s.Properties {
		if t, _ := p.Type.(string); t != "string" {
			continue
		}
		if slices.Contains(pathArguments, name) {
			named = append(named, name)
		} else if p.Format == "uri" {
			uris = append(uris, name)
		}
	}
	switch {
	case len(named) == 1:
		return named[0]
	case len(named) == 0 && len(uris) == 1:
		return uris[0]
	}
	return ""
}

// unreadableRules says, for the tools served here whose rules in
// toolgate's policy name no argument to read (unreadable: toolgate's word
// for each, by tool), what to add to the policy: the argument each tool's
// schema marks, where it marks one (schemas: by tool). nil when there are
// none.
func unreadableRules(unreadable map[string]string, schemas map[string]any) error {
	if len(unreadable) == 0 {
		return nil
	}
	var fixes []string
	for _, tool := range slices.Sorted(maps.Keys(unreadable)) {
		arg := schemaArgument(schemas[tool])
		if arg == "" {
			arg = "<argument name>"
		}
		fixes = append(fixes, fmt.Sprintf("%s: %s", tool, arg))
	}
	return fmt.Errorf("toolgate's policy has rules on the arguments of %s without saying which argument they read, so they deny or ask about every call and allow none: "+
		"add to the policy matchArgument: {%s} (docs/mcp-gateway.md)", strings.Join(slices.Sorted(maps.Keys(unreadable)), ", "), strings.Join(fixes, ", "))
}

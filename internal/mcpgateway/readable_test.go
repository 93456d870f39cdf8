package mcpgateway

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The argument a schema marks is the one a rule on the tool is offered to
// read: by name, else by format, never a guess among several.
func TestSchemaArgument(t *testing.T) {
	t.Parallel()
	str := map[string]any{"type": "string"}
	for want, schema := range map[string]map[string]any{
		"path":   {"content": str, "path": str},
		"target": {"content": str, "target": map[string]any{"type": "string", "format": "uri"}},
		"":       {"content": str, "query": str},
	} {
		assert.Equal(t, want, schemaArgument(map[string]any{"type": "object", "properties": schema}), "%v", schema)
	}
	assert.Empty(t, schemaArgument(map[string]any{"properties": map[string]any{"path": str, "url": str}}), "two could be meant")
	assert.Empty(t, schemaArgument(map[string]any{"properties": map[string]any{"path": map[string]any{"type": "array"}}}), "not a string")
}

package docs

import (
	"encoding/json"
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHTTPAPI_NamesEveryRoute: http-api.md names every path of the OpenAPI
// document the server serves, so that a new route is on the page.
func TestHTTPAPI_NamesEveryRoute(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile("http-api.md")
	require.NoError(t, err)
	data, err := os.ReadFile("../internal/httpapi/openapi.json")
	require.NoError(t, err)
	var spec struct {
		Paths map[string]json.RawMessage `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(data, &spec))
	require.NotEmpty(t, spec.Paths)
	for path := range spec.Paths {
		named := regexp.MustCompile(regexp.QuoteMeta(path) + "[`?,; ]")
		assert.True(t, named.Match(page), "http-api.md does not name %s", path)
	}
}

// TestHTTPAPI_GeneratorIsThePinnedOne: the oapi-codegen command of
// http-api.md runs the version api's generated-client test pins.
func TestHTTPAPI_GeneratorIsThePinnedOne(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile("http-api.md")
	require.NoError(t, err)
	mod, err := os.ReadFile("../internal/httpapi/testdata/oapiclient/go.mod")
	require.NoError(t, err)
	pinned := regexp.MustCompile(`github.com/oapi-codegen/oapi-codegen/v2 (v[0-9.]+)`).FindSubmatch(mod)
	require.NotNil(t, pinned, "api/testdata/oapiclient/go.mod pins no oapi-codegen")
	assert.Contains(t, string(page), "oapi-codegen@"+string(pinned[1])+" ", "http-api.md's oapi-codegen command")
}

package httpapi_test

import (
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/wire"
)

// TestInbox_ListensToEveryEvent: the inbox names the server-sent events it
// listens to; an event the relay publishes and the page does not name is
// never seen there (a reminder, say), so the list must be the contract's.
func TestInbox_ListensToEveryEvent(t *testing.T) {
	t.Parallel()
	js, err := os.ReadFile("web/app.js")
	require.NoError(t, err)
	list := regexp.MustCompile(`(?s)const SUBJECTS = \[(.*?)\];`).FindSubmatch(js)
	require.NotNil(t, list, "app.js has no SUBJECTS list")
	var named []string
	for _, m := range regexp.MustCompile(`'([^']+)'`).FindAllSubmatch(list[1], -1) {
		named = append(named, string(m[1]))
	}
	assert.ElementsMatch(t, wire.EventSubjects(), named)
}

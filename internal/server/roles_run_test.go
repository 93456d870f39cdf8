package server_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/toolgate/toolgate/internal/server"
	"github.com/toolgate/toolgate/toolgatetest"
)

// TestRoles_EachRunsOnItsOwn starts a process for each role alone: it
// gets ready, serves HTTP only with the http role, and stops cleanly.
func TestRoles_EachRunsOnItsOwn(t *testing.T) {
	t.Parallel()
	for _, name := range server.RoleNames() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := toolgatetest.Start(t, toolgatetest.Options{Roles: []string{name}})
			assert.Equal(t, name == "http", g.HTTPURL != "", "an HTTP address only with the http role")
			assert.Equal(t, name == "http", g.Main.HTTPHandler() != nil, "an HTTP handler only with the http role")
		})
	}
}

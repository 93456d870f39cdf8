package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestVersion_Flag: --version prints what `version` prints; -v is no flag.
func TestVersion_Flag(t *testing.T) {
	t.Parallel()
	want := cli(t, "", "version")
	require.Equal(t, exitOK, want.code)
	require.True(t, strings.HasPrefix(want.stdout, "toolgate "+version), want.stdout)
	assert.Equal(t, want, cli(t, "", "--version"))
	r := cli(t, "", "-v")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.stderr, "flag provided but not defined: -v")
	assert.Empty(t, r.stdout)
}

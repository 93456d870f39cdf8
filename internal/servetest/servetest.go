// Package servetest is what tests that start toolgate processes share:
// the data directory of each toolgate a test started, by its NATS URL,
// so that a verb or a connection to that URL finds the credentials
// there, as it would on the machine serve runs on.
package servetest

import (
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/server"
)

// dataDirs maps the NATS URL of each toolgate a test started to its data
// directory.
var dataDirs sync.Map

// Remember maps url to data until t ends: a later test may be given the
// same port, and must not find this test's credentials under it.
func Remember(t testing.TB, url, data string) {
	dataDirs.Store(url, data)
	t.Cleanup(func() { dataDirs.CompareAndDelete(url, data) })
}

// Lookup is the data directory of the toolgate a test started at url,
// if one did.
func Lookup(url string) (string, bool) {
	data, ok := dataDirs.Load(url)
	if !ok {
		return "", false
	}
	return data.(string), true
}

// DataDir is the data directory of the toolgate a test started at url.
func DataDir(t testing.TB, url string) string {
	t.Helper()
	data, ok := Lookup(url)
	require.True(t, ok, "no toolgate started at %s", url)
	return data
}

// Connect connects to the toolgate serving at url with its own
// credential, as another toolgate process would (with none when no test
// remembered url).
func Connect(t testing.TB, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	var opts []nats.Option
	if data, ok := Lookup(url); ok {
		opts = append(opts, nats.UserCredentials(server.CredsPath(data, "toolgate")))
	}
	return bustest.Connect(t, url, opts...)
}

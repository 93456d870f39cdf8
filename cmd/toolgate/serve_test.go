package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/server"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

func TestServe_EmbeddedServerRelaysToOtherProcesses(t *testing.T) {
	t.Parallel()
	g := toolgatetest.Start(t, toolgatetest.Options{})
	// The test's connection is another process's, on the address serve
	// listens on.
	assertRelays(t, g.JS)
}

func TestServe_OnAClusterWithReplicas3(t *testing.T) {
	t.Parallel()
	js := toolgatetest.Start(t, toolgatetest.Options{Cluster: true}).JS
	kv := assertRelays(t, js)
	st, err := kv.Status(t.Context())
	require.NoError(t, err)
	assert.Equal(t, 3, st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config.Replicas)
	for _, name := range []string{wire.EventsStream, wire.DeadLetterStream} {
		s, err := js.Stream(t.Context(), name)
		require.NoError(t, err)
		assert.Equal(t, 3, s.CachedInfo().Config.Replicas, name)
	}
}

// assertRelays submits a call through js and waits for its event.
func assertRelays(t *testing.T, js jetstream.JetStream) jetstream.KeyValue {
	t.Helper()
	ctx := t.Context()
	kv, err := js.KeyValue(ctx, wire.CallsBucket)
	require.NoError(t, err)
	m := machine.New(bus.NewKVStore(js, kv))
	e, err := m.Submit(ctx, machine.Call{ToolName: "web_search", CallerBotID: "bot", ConversationID: "serve"})
	require.NoError(t, err)
	s, err := js.Stream(ctx, wire.EventsStream)
	require.NoError(t, err)
	bustest.Eventually(t, 30*time.Second, 20*time.Millisecond, "the call announced on approval_required", func() (bool, any) {
		msg, err := s.GetLastMsgForSubject(ctx, wire.SubjectApprovalRequired)
		if err != nil {
			return false, err
		}
		return bytes.Contains(msg.Data, []byte(e.PendingID)), string(msg.Data)
	})
	return kv
}

func TestServe_BadConfigurationIsNamed(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{args: []string{"--replicas", "0"}, want: "--replicas: must be 1 to 5, got 0"},
		{args: []string{"--replicas", "3"}, want: "--replicas 3 needs a cluster"},
		{args: []string{"--listen", "4222"}, want: `--listen "4222"`},
		{args: []string{"--listen", "127.0.0.1:http"}, want: "port must be a number"},
		{env: map[string]string{"TOOLGATE_REPLICAS": "three"}, want: `TOOLGATE_REPLICAS="three"`},
		{env: map[string]string{"TOOLGATE_LOG_LEVEL": "loud"}, want: "TOOLGATE_LOG_LEVEL"},
		{args: []string{"extra"}, want: `unexpected argument "extra"`},
		{args: []string{"--executor-lease", "0s"}, want: "--executor-lease: must be > 0"},
		{args: []string{"--retention", "-1h"}, want: "--retention: must be >= 0"},
		{env: map[string]string{"TOOLGATE_ARCHIVE_MAX_AGE": "-1h"}, want: "--archive-max-age: must be >= 0"},
		{args: []string{"--tools", "exec,ftp"}, want: `unknown tool "ftp"`},
		{args: []string{"--roles", "relay,janitor"}, want: `unknown role "janitor"`},
		{args: []string{"--http", "localhost"}, want: `--http "localhost"`},
		{args: []string{"--allowed-hosts", "toolgate.example.com:8080"}, want: "want a host name without a port"},
		{env: map[string]string{"TOOLGATE_ALLOWED_HOSTS": "https://toolgate.example"}, want: "TOOLGATE_ALLOWED_HOSTS"},
	} {
		t.Run(strings.Join(tc.args, " ")+fmt.Sprint(tc.env), func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var stderr bytes.Buffer
			code := run(t.Context(), append([]string{"serve"}, tc.args...), &stderr, &stderr)
			assert.NotZero(t, code)
			assert.Contains(t, stderr.String(), tc.want)
		})
	}
}

func TestServe_FlagsFromEnvironment(t *testing.T) {
	t.Setenv("TOOLGATE_EVENTS_MAX_AGE", "1h")
	t.Setenv("TOOLGATE_NATS_USER", "agent")
	fs, cfg := newServeFlags(&bytes.Buffer{})
	require.NoError(t, parseFlags(fs, []string{"--replicas", "1"}))
	assert.Equal(t, time.Hour, cfg.EventsMaxAge)
	assert.Equal(t, "agent", cfg.Conn.User)

	t.Setenv("TOOLGATE_REPLICAS", "2")
	fs, cfg = newServeFlags(&bytes.Buffer{})
	require.NoError(t, parseFlags(fs, []string{"--replicas", "1"}))
	assert.Equal(t, 1, cfg.Replicas, "a flag on the command line beats the environment")
}

func TestVersion(t *testing.T) {
	var out bytes.Buffer
	assert.Equal(t, 0, run(t.Context(), []string{"version"}, &out, &out))
	assert.Contains(t, out.String(), "toolgate ")
	assert.Equal(t, 2, run(t.Context(), []string{"frobnicate"}, &out, &out))
}

func decode[T any](t *testing.T, data []byte) T {
	var v T
	require.NoError(t, json.Unmarshal(data, &v))
	return v
}

func TestServe_MetricsListenerWithoutTheHTTPRole(t *testing.T) {
	t.Parallel()
	addr := fmt.Sprintf("127.0.0.1:%d", bustest.FreePort(t))
	toolgatetest.Start(t, toolgatetest.Options{
		Roles:     []string{"relay", "intake", "analytics"},
		Configure: func(c *server.Config) { c.Metrics = addr },
	})
	var body string
	bustest.Eventually(t, 10*time.Second, 20*time.Millisecond, "toolgate metrics at --metrics", func() (bool, any) {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		body = string(data)
		return resp.StatusCode == 200 && strings.Contains(body, "toolgate_consumer_pending_messages"), resp.Status + ": " + body
	})
}

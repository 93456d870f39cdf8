package client_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/machine"
)

// With a connect wait, a request made while the connection is down fails
// once the wait is over, saying where toolgate is unreachable; without
// one, it waits out its context.
func TestClient_ConnectWait(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	url := "nats://" + l.Addr().String()
	require.NoError(t, l.Close()) // nothing listens there
	nc, err := nats.Connect(url, nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	call := machine.Call{ToolCallID: "t1", ToolName: "Bash", ConversationID: "connect-wait", Arguments: []byte(`{}`)}

	c, err := client.New(nc, client.WithConnectWait(300*time.Millisecond))
	require.NoError(t, err)
	began := time.Now()
	_, err = c.Submit(t.Context(), call)
	assert.Less(t, time.Since(began), 2*time.Second, "within the connect wait")
	assert.ErrorIs(t, err, client.ErrUnavailable)
	var down *client.UnreachableError
	require.ErrorAs(t, err, &down)
	assert.Equal(t, url, down.URL)
	assert.ErrorContains(t, err, "toolgate is unreachable at "+url+": no connection to it within 300ms")

	plain, err := client.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	_, err = plain.Submit(ctx, call)
	assert.NotErrorAs(t, err, &down, "without a connect wait the request is sent anyway, and waits")
}

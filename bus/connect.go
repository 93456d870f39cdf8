package bus

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ConnConfig says how to reach NATS servers.
type ConnConfig struct {
	URLs      string // comma-separated nats:// URLs
	User      string
	Password  string
	Token     string
	CredsFile string
	// TLS: the CA that signs the servers' certificates (default: the
	// system's), and a client certificate and its key for servers that
	// verify clients.
	TLSCA, TLSCert, TLSKey string
	Name                   string // connection name shown by the server
}

// check says what is wrong with c's TLS settings.
func (c ConnConfig) check() error {
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return fmt.Errorf("nats: --nats-tls-cert and --nats-tls-key go together: a client certificate needs its key")
	}
	return nil
}

// Options returns the nats.go options for c: credentials, and reconnecting
// for as long as the process runs, since a toolgate role is useless without
// its bus and a cluster member may come back.
func (c ConnConfig) Options() []nats.Option {
	opts := []nats.Option{
		nats.Name(c.Name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
	}
	if c.User != "" {
		opts = append(opts, nats.UserInfo(c.User, c.Password))
	}
	if c.Token != "" {
		opts = append(opts, nats.Token(c.Token))
	}
	if c.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(c.CredsFile))
	}
	return append(opts, c.TLSOptions()...)
}

// TLSOptions returns the nats.go options of c's TLS settings.
func (c ConnConfig) TLSOptions() []nats.Option {
	var opts []nats.Option
	if c.TLSCA != "" {
		opts = append(opts, nats.RootCAs(c.TLSCA))
	}
	if c.TLSCert != "" {
		opts = append(opts, nats.ClientCert(c.TLSCert, c.TLSKey))
	}
	return opts
}

// Connect connects to the servers in c.URLs.
func Connect(c ConnConfig, extra ...nats.Option) (*nats.Conn, error) {
	if strings.TrimSpace(c.URLs) == "" {
		return nil, fmt.Errorf("nats: no server URL given")
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	nc, err := nats.Connect(c.URLs, append(c.Options(), extra...)...)
	if err != nil {
		return nil, fmt.Errorf("nats: connect %s: %w", c.URLs, err)
	}
	return nc, nil
}

// Conn is a process's connection to NATS as the packages above bus hold
// it: internal/server makes it of the connection it dialled and the
// JetStream it opened on it (NewConn), and the application layer, the
// workers, the metrics and the analytics build their stores and feeds
// over it and publish, listen and request through it, naming none of
// nats.go's types.
type Conn struct {
	nc *nats.Conn
	js jetstream.JetStream
}

// NewConn returns js and its connection as a Conn; nil without one.
func NewConn(js jetstream.JetStream) *Conn {
	if js == nil {
		return nil
	}
	return &Conn{nc: js.Conn(), js: js}
}

// JetStream is the connection's JetStream (nil without a connection), for
// the constructors of bus and internal/bus and internal/consumer's runners.
func (c *Conn) JetStream() jetstream.JetStream {
	if c == nil {
		return nil
	}
	return c.js
}

// Publish sends data on subject, over core NATS.
func (c *Conn) Publish(subject string, data []byte) error {
	if c == nil {
		return nats.ErrInvalidConnection
	}
	return c.nc.Publish(subject, data)
}

// Listen calls fn with the data of every message on subject until ctx
// ends, one message at a time.
func (c *Conn) Listen(ctx context.Context, subject string, fn func(data []byte)) error {
	sub, err := c.nc.Subscribe(subject, func(msg *nats.Msg) { fn(msg.Data) })
	if err != nil {
		return fmt.Errorf("listen on %s: %w", subject, err)
	}
	<-ctx.Done()
	_ = sub.Unsubscribe() // gone with the connection, if it closed first
	return nil
}

// Request sends data with header on subject, over core NATS, and returns
// the answer's data.
func (c *Conn) Request(ctx context.Context, subject string, data []byte, header map[string][]string) ([]byte, error) {
	m := nats.NewMsg(subject)
	m.Data = data
	for k, v := range header {
		m.Header[k] = v
	}
	resp, err := c.nc.RequestMsgWithContext(ctx, m)
	if err != nil {
		return nil, err
	}
	return resp.Data, nil
}

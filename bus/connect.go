package bus

import (
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
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

// Package embedded runs a NATS server with JetStream inside the process:
// toolgate serve's single-machine mode, and the tests' servers. It is apart
// from bus so that agents importing the client do not link a NATS server.
package embedded

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
)

// ServerConfig configures an embedded NATS server with JetStream.
type ServerConfig struct {
	Name     string // server name; unique within a cluster
	Host     string // client listen host
	Port     int    // client port; -1 picks a free one
	StoreDir string // JetStream file storage
	// SyncAlways has JetStream fsync every write before it acknowledges
	// it, rather than on its interval (2 minutes): an acknowledged write
	// then survives a power cut, not only a killed process.
	SyncAlways bool

	// User and Password, or Token, when set, are required of clients.
	User, Password, Token string
	// Configure, when set, changes the options last: toolgate's own
	// server trusts its operator there (package auth).
	Configure func(*natsserver.Options) error

	// Cluster, when set, joins the server to a cluster of embedded servers.
	Cluster *ClusterConfig
}

// ClusterConfig places an embedded server in a NATS cluster.
type ClusterConfig struct {
	Name   string
	Host   string
	Port   int      // route port; -1 picks a free one
	Routes []string // nats-route://host:port of every member, this one included
}

// readyWait bounds how long a server may take to take clients: seconds
// on a quiet machine, many more on a loaded one (a JetStream store to
// recover, a test suite beside it).
const readyWait = time.Minute

// StartServer starts an embedded server and waits until it takes clients.
func StartServer(cfg ServerConfig) (*natsserver.Server, error) {
	opts := &natsserver.Options{
		ServerName:    cfg.Name,
		Host:          cfg.Host,
		Port:          cfg.Port,
		JetStream:     true,
		StoreDir:      cfg.StoreDir,
		NoSigs:        true,
		SyncAlways:    cfg.SyncAlways,
		Username:      cfg.User,
		Password:      cfg.Password,
		Authorization: cfg.Token,
	}
	if c := cfg.Cluster; c != nil {
		opts.Cluster = natsserver.ClusterOpts{Name: c.Name, Host: c.Host, Port: c.Port}
		for _, r := range c.Routes {
			u, err := url.Parse(r)
			if err != nil {
				return nil, fmt.Errorf("cluster route %q: %w", r, err)
			}
			opts.Routes = append(opts.Routes, u)
		}
	}
	if cfg.Configure != nil {
		if err := cfg.Configure(opts); err != nil {
			return nil, fmt.Errorf("nats server: %w", err)
		}
	}
	s, err := natsserver.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("nats server: %w", err)
	}
	// A server that cannot start (its port is taken, its store is
	// another's) says so only to its logger, and would be waited for in
	// vain: hear it, and fail at once.
	fatal := make(chan string, 1)
	s.SetLogger(fatalLogger(fatal), false, false)
	s.Start()
	addr := net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port))
	for deadline := time.Now().Add(readyWait); ; {
		select {
		case msg := <-fatal:
			s.Shutdown()
			return nil, fmt.Errorf("nats server on %s: %s", addr, msg)
		default:
		}
		if s.ReadyForConnections(50 * time.Millisecond) {
			return s, nil
		}
		if time.Now().After(deadline) {
			s.Shutdown()
			return nil, fmt.Errorf("nats server on %s: not ready for connections after %s", addr, readyWait)
		}
	}
}

// fatalLogger passes the server's first fatal error on and drops
// everything else, as the embedded server without a logger did.
type fatalLogger chan<- string

func (l fatalLogger) Fatalf(format string, v ...any) {
	select {
	case l <- fmt.Sprintf(format, v...):
	default:
	}
}

func (fatalLogger) Noticef(string, ...any) {}
func (fatalLogger) Warnf(string, ...any)   {}
func (fatalLogger) Errorf(string, ...any)  {}
func (fatalLogger) Debugf(string, ...any)  {}
func (fatalLogger) Tracef(string, ...any)  {}

package faultsuite

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/netfault"
)

// partitionCluster is a natsCluster whose every route between two
// servers, and every connection of toolgate's processes and of the
// test's clients, goes through a netfault.Link, so that a test
// partitions a server or a process without killing it. The test's own
// views (connectTo) dial the servers directly: they watch from outside
// the network.
type partitionCluster struct {
	*natsCluster
	// routes[i][j] is server i's route to server j.
	routes [][]*netfault.Link

	mu      sync.Mutex
	clients map[string][]*netfault.Link // by who dials: one link to each server, in server order
}

// startPartitionCluster starts a 3-node cluster as startNATSCluster does,
// with each server's routes through links, each advertising a cluster
// address nothing listens on and no client URLs, so that neither a
// server nor a client learns a way round the links.
func startPartitionCluster(t *testing.T) *partitionCluster {
	t.Helper()
	const n = 3
	bin := natsServerBinary(t)
	dir := t.TempDir()
	c := &partitionCluster{natsCluster: &natsCluster{t: t, auth: filepath.Join(dir, "auth")}, clients: map[string][]*netfault.Link{}}
	r := cli(t, "", "creds", "init", "--data", c.auth)
	require.Equal(t, 0, r.code, r.stderr)
	r = cli(t, "", "creds", "nats-config", "--data", c.auth)
	require.Equal(t, 0, r.code, r.stderr)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "auth.conf"), []byte(r.stdout), 0o600))

	routePorts := make([]int, n)
	for i := range n {
		routePorts[i] = bustest.FreePort(t)
	}
	c.routes = make([][]*netfault.Link, n)
	for i := range n {
		c.routes[i] = make([]*netfault.Link, n)
		for j := range n {
			if i != j {
				c.routes[i][j] = c.link(t, fmt.Sprintf("route n%d>n%d", i, j), fmt.Sprintf("127.0.0.1:%d", routePorts[j]))
			}
		}
	}
	var urls []string
	for i := range n {
		s := &natsServer{
			Name:    fmt.Sprintf("n%d", i),
			URL:     fmt.Sprintf("nats://127.0.0.1:%d", bustest.FreePort(t)),
			monitor: fmt.Sprintf("127.0.0.1:%d", bustest.FreePort(t)),
			conf:    filepath.Join(dir, fmt.Sprintf("n%d.conf", i)),
			log:     &lockedLog{},
		}
		var routes []string
		for j := range n {
			if j != i {
				routes = append(routes, "nats-route://"+c.routes[i][j].Addr())
			}
		}
		conf := fmt.Sprintf(`server_name: %s
listen: %s
http: %s
include ./auth.conf
jetstream {
  store_dir: %q
  max_memory_store: 64MB
  max_file_store: 1GB
}
cluster {
  name: partitions
  listen: 127.0.0.1:%d
  advertise: "127.0.0.1:%d"
  no_advertise: true
  routes: [
    %s
  ]
}
`, s.Name, strings.TrimPrefix(s.URL, "nats://"), s.monitor, filepath.Join(dir, s.Name), routePorts[i], bustest.FreePort(t), strings.Join(routes, "\n    "))
		require.NoError(t, os.WriteFile(s.conf, []byte(conf), 0o600))
		c.servers = append(c.servers, s)
		urls = append(urls, s.URL)
	}
	c.launch(t, bin, urls)
	return c
}

// link starts a link to target, closed when the test ends.
func (c *partitionCluster) link(t *testing.T, name, target string) *netfault.Link {
	t.Helper()
	l, err := netfault.Listen(name, target)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// dialer returns the NATS URLs through which who reaches the cluster:
// a link of its own to each server, which the test cuts to cut who off.
func (c *partitionCluster) dialer(t *testing.T, who string) string {
	t.Helper()
	var urls []string
	var links []*netfault.Link
	for _, s := range c.servers {
		l := c.link(t, who+">"+s.Name, strings.TrimPrefix(s.URL, "nats://"))
		links = append(links, l)
		urls = append(urls, "nats://"+l.Addr())
	}
	c.mu.Lock()
	c.clients[who] = links
	c.mu.Unlock()
	return strings.Join(urls, ",")
}

// of returns who's links.
func (c *partitionCluster) of(who string) []*netfault.Link {
	c.mu.Lock()
	defer c.mu.Unlock()
	links, ok := c.clients[who]
	if !ok {
		c.t.Fatalf("no links for %q", who)
	}
	return links
}

// index returns the position of the server called name.
func (c *partitionCluster) index(name string) int {
	for i, s := range c.servers {
		if s.Name == name {
			return i
		}
	}
	c.t.Fatalf("no nats-server called %q", name)
	return -1
}

// isolation is every link into or out of server k: its routes both ways
// and every client's link to it.
func (c *partitionCluster) isolation(k int) []*netfault.Link {
	var links []*netfault.Link
	for j := range c.servers {
		if j != k {
			links = append(links, c.routes[k][j], c.routes[j][k])
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ls := range c.clients {
		links = append(links, ls[k])
	}
	return links
}

// routesOf is the routes between servers i and j, both ways.
func (c *partitionCluster) routesOf(i, j int) []*netfault.Link {
	return []*netfault.Link{c.routes[i][j], c.routes[j][i]}
}

// linkLog is what was done to every link, in time order.
func (c *partitionCluster) linkLog() string {
	var all []string
	for _, row := range c.routes {
		for _, l := range row {
			if l != nil {
				all = append(all, l.Log()...)
			}
		}
	}
	c.mu.Lock()
	for _, ls := range c.clients {
		for _, l := range ls {
			all = append(all, l.Log()...)
		}
	}
	c.mu.Unlock()
	slices.Sort(all)
	return strings.Join(all, "\n")
}

// routez is the number of routes server s has open now.
func (s *natsServer) routez() (int, string) {
	code, body, err := s.get("/routez")
	if err != nil || code != http.StatusOK {
		return -1, fmt.Sprintf("%s /routez: %d %v", s.Name, code, err)
	}
	var z struct {
		NumRoutes int `json:"num_routes"`
	}
	if err := jsonUnmarshal(body, &z); err != nil {
		return -1, err.Error()
	}
	return z.NumRoutes, fmt.Sprintf("%s has %d routes", s.Name, z.NumRoutes)
}

// waitIsolated waits until server s has no route open: the links, not
// a way round them, carry every route.
func (c *partitionCluster) waitIsolated(t *testing.T, s *natsServer, d time.Duration) {
	t.Helper()
	waitFor(t, d, func() (bool, string) {
		got, saw := s.routez()
		return got == 0, saw
	}, "nats-server %s keeps a route with every link to it cut", s.Name)
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

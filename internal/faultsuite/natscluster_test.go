package faultsuite

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/server"
	"github.com/toolgate/toolgate/internal/servetest"
)

// natsCluster is a JetStream cluster of real nats-server processes, each
// of which a test can SIGKILL and start again on the same ports and store.
type natsCluster struct {
	t       *testing.T
	auth    string // the data directory of `toolgate creds init`: the trust chain and every role's credential
	URLs    string // every server's client URL, comma-separated
	servers []*natsServer
}

// natsServer is one member: its configuration and its current process.
type natsServer struct {
	Name    string
	URL     string // client URL
	monitor string // HOST:PORT of its monitoring endpoint
	conf    string
	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	log     *lockedLog // every run's stderr
}

type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startNATSCluster makes a trust chain with `toolgate creds init`, the
// servers' authorization with `toolgate creds nats-config`, and starts n
// nats-servers routed to each other in operator mode with JetStream. It
// returns once JetStream has a meta leader that sees every peer. The
// cluster's URLs are remembered with the trust chain's directory, so
// startServe and connect find toolgate's credential.
func startNATSCluster(t *testing.T, n int) *natsCluster {
	t.Helper()
	bin := natsServerBinary(t)
	dir := t.TempDir()
	c := &natsCluster{t: t, auth: filepath.Join(dir, "auth")}
	r := cli(t, "", "creds", "init", "--data", c.auth)
	require.Equal(t, 0, r.code, r.stderr)
	r = cli(t, "", "creds", "nats-config", "--data", c.auth)
	require.Equal(t, 0, r.code, r.stderr)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "auth.conf"), []byte(r.stdout), 0o600))

	routes := make([]string, n)
	routePorts := make([]int, n)
	for i := range n {
		routePorts[i] = bustest.FreePort(t)
		routes[i] = fmt.Sprintf("nats-route://127.0.0.1:%d", routePorts[i])
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
  name: faults
  listen: 127.0.0.1:%d
  routes: [
    %s
  ]
}
`, s.Name, strings.TrimPrefix(s.URL, "nats://"), s.monitor, filepath.Join(dir, s.Name), routePorts[i], strings.Join(routes, "\n    "))
		require.NoError(t, os.WriteFile(s.conf, []byte(conf), 0o600))
		c.servers = append(c.servers, s)
		urls = append(urls, s.URL)
	}
	c.launch(t, bin, urls)
	return c
}

// launch starts the cluster's servers, whose configurations are written,
// kills them when the test ends, and waits for JetStream's meta leader;
// urls are their client URLs.
func (c *natsCluster) launch(t *testing.T, bin string, urls []string) {
	t.Helper()
	c.URLs = strings.Join(urls, ",")
	servetest.Remember(t, c.URLs, c.auth)
	t.Cleanup(func() {
		for _, s := range c.servers {
			s.kill()
		}
	})
	for _, s := range c.servers {
		s.start(t, bin)
	}
	c.waitMetaLeader(t)
}

// start runs the server's process (again) and waits until it takes clients.
func (s *natsServer) start(t *testing.T, bin string) {
	t.Helper()
	cmd := exec.Command(bin, "-c", s.conf)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout, cmd.Stderr = s.log, s.log
	fmt.Fprintf(s.log, "--- %s: start\n", time.Now().Format(time.RFC3339Nano))
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	waitFor(t, 30*time.Second, func() (bool, string) {
		select {
		case <-done:
			return false, "it exited:\n" + s.log.String()
		default:
		}
		code, body, err := s.get("/varz")
		if err != nil {
			return false, err.Error()
		}
		return code == http.StatusOK, fmt.Sprintf("/varz: %d %.200s", code, body)
	}, "nats-server %s does not serve", s.Name)
}

// kill SIGKILLs the server's process, if it runs.
func (s *natsServer) kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
	fmt.Fprintf(s.log, "--- %s: killed\n", time.Now().Format(time.RFC3339Nano))
}

// get asks the server's monitoring endpoint for path.
func (s *natsServer) get(path string) (int, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.monitor+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// jsz is what the test reads of a server's /jsz.
type jsz struct {
	Meta *struct {
		Leader   string `json:"leader"`
		Size     int    `json:"cluster_size"`
		Replicas []struct {
			Name    string `json:"name"`
			Current bool   `json:"current"`
		} `json:"replicas"`
	} `json:"meta_cluster"`
}

// metaLeader is the JetStream meta leader as server s sees it, when that
// leader sees every other member current; "" otherwise.
func (c *natsCluster) metaLeader(s *natsServer) (string, string) {
	code, body, err := s.get("/jsz")
	if err != nil {
		return "", err.Error()
	}
	var j jsz
	if code != http.StatusOK || json.Unmarshal([]byte(body), &j) != nil || j.Meta == nil {
		return "", fmt.Sprintf("%s /jsz: %d %.300s", s.Name, code, body)
	}
	if j.Meta.Leader != s.Name {
		return "", fmt.Sprintf("%s /jsz: leader %q", s.Name, j.Meta.Leader)
	}
	current := 0
	for _, r := range j.Meta.Replicas {
		if r.Current {
			current++
		}
	}
	if current != len(c.servers)-1 {
		return "", fmt.Sprintf("%s /jsz: leading, %d of %d peers current: %.300s", s.Name, current, len(c.servers)-1, body)
	}
	return s.Name, ""
}

// waitMetaLeader waits until a server leads JetStream's meta group with
// every peer current: before that, toolgate's provisioning of replicated
// streams fails or waits.
func (c *natsCluster) waitMetaLeader(t *testing.T) string {
	t.Helper()
	var leader string
	waitFor(t, 60*time.Second, func() (bool, string) {
		var seen []string
		for _, s := range c.servers {
			l, why := c.metaLeader(s)
			if l != "" {
				leader = l
				return true, ""
			}
			seen = append(seen, why)
		}
		return false, strings.Join(seen, "; ")
	}, "no JetStream meta leader with every peer current")
	return leader
}

// waitHealthy waits until every server answers /healthz (JetStream
// current on it, streams and consumers included). It asks every 100ms: a
// server logs each failed health check.
func (c *natsCluster) waitHealthy(t *testing.T) {
	t.Helper()
	waitEvery(t, 60*time.Second, 100*time.Millisecond, func() (bool, string) {
		for _, s := range c.servers {
			code, body, err := s.get("/healthz")
			if err != nil || code != http.StatusOK {
				return false, fmt.Sprintf("%s /healthz: %d %v %.300s", s.Name, code, err, body)
			}
		}
		return true, ""
	}, "the cluster is not healthy")
}

// server returns the member called name.
func (c *natsCluster) server(name string) *natsServer {
	for _, s := range c.servers {
		if s.Name == name {
			return s
		}
	}
	c.t.Fatalf("no nats-server called %q", name)
	return nil
}

// connectTo connects with toolgate's own credential to the servers in
// the order given, first first (no shuffling), so that a test chooses the
// member it talks through.
func (c *natsCluster) connectTo(t *testing.T, creds string, first *natsServer) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	urls := []string{first.URL}
	for _, s := range c.servers {
		if s != first {
			urls = append(urls, s.URL)
		}
	}
	opts := []nats.Option{nats.DontRandomize()}
	if creds == "" {
		opts = append(opts, nats.UserCredentials(server.CredsPath(c.auth, "toolgate")))
	} else {
		o, err := client.Credentials(creds)
		require.NoError(t, err)
		opts = append(opts, o...)
	}
	return bustest.Connect(t, strings.Join(urls, ","), opts...)
}

// streamInfo asks for a stream's info, bounded by d.
func streamInfo(js jetstream.JetStream, stream string, d time.Duration) (*jetstream.StreamInfo, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	return s.CachedInfo(), nil
}

// waitFor polls cond every 20ms until it holds, and fails the test with
// what it last saw if it does not within d.
func waitFor(t *testing.T, d time.Duration, cond func() (bool, string), msg string, args ...any) {
	t.Helper()
	waitEvery(t, d, 20*time.Millisecond, cond, msg, args...)
}

// waitEvery is waitFor, polling every interval.
func waitEvery(t *testing.T, d, interval time.Duration, cond func() (bool, string), msg string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		ok, saw := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s after %s; last seen: %s", fmt.Sprintf(msg, args...), d, saw)
		}
		<-tick.C
	}
}

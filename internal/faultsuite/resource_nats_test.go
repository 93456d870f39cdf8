package faultsuite

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/servetest"
)

// startNATSStandalone starts one nats-server, not clustered, in operator
// mode with JetStream (the trust chain from `toolgate creds init`, as
// startNATSCluster makes it), its file store limited to maxFile
// (max_file_store, e.g. "8MB"): a store a test can fill. It returns once
// JetStream is healthy; the cluster it returns has that one member.
func startNATSStandalone(t *testing.T, maxFile string) *natsCluster {
	t.Helper()
	bin := natsServerBinary(t)
	dir := t.TempDir()
	c := &natsCluster{t: t, auth: filepath.Join(dir, "auth")}
	r := cli(t, "", "creds", "init", "--data", c.auth)
	require.Equal(t, 0, r.code, r.stderr)
	r = cli(t, "", "creds", "nats-config", "--data", c.auth)
	require.Equal(t, 0, r.code, r.stderr)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "auth.conf"), []byte(r.stdout), 0o600))

	s := &natsServer{
		Name:    "n0",
		URL:     fmt.Sprintf("nats://127.0.0.1:%d", bustest.FreePort(t)),
		monitor: fmt.Sprintf("127.0.0.1:%d", bustest.FreePort(t)),
		conf:    filepath.Join(dir, "n0.conf"),
		log:     &lockedLog{},
	}
	s.writeStandaloneConf(t, filepath.Join(dir, s.Name), maxFile)
	c.servers = []*natsServer{s}
	c.URLs = s.URL
	servetest.Remember(t, c.URLs, c.auth)
	t.Cleanup(s.kill)
	s.start(t, bin)
	c.waitHealthy(t)
	return c
}

// writeStandaloneConf writes the configuration of a standalone server
// whose JetStream stores in storeDir, at most maxFile of it.
func (s *natsServer) writeStandaloneConf(t *testing.T, storeDir, maxFile string) {
	t.Helper()
	conf := fmt.Sprintf(`server_name: %s
listen: %s
http: %s
include ./auth.conf
jetstream {
  store_dir: %q
  max_memory_store: 64MB
  max_file_store: %s
}
`, s.Name, strings.TrimPrefix(s.URL, "nats://"), s.monitor, storeDir, maxFile)
	require.NoError(t, os.WriteFile(s.conf, []byte(conf), 0o600))
}

// raiseMaxFileStore rewrites the standalone server's max_file_store to
// maxFile and has it reload its configuration (SIGHUP), as an operator
// who makes room does: nats-server raises the limit of a running
// JetStream (it refuses to lower one). It returns once the server logs
// the new limit.
func (s *natsServer) raiseMaxFileStore(t *testing.T, storeDir, maxFile string) {
	t.Helper()
	s.writeStandaloneConf(t, storeDir, maxFile)
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	before := strings.Count(s.log.String(), "Reloaded: JetStream max_file_store")
	require.NoError(t, cmd.Process.Signal(syscall.SIGHUP))
	waitFor(t, 30*time.Second, func() (bool, string) {
		return strings.Count(s.log.String(), "Reloaded: JetStream max_file_store") > before, grepNATS(s.log.String())
	}, "nats-server %s did not reload max_file_store %s", s.Name, maxFile)
}

// storeDir is where the standalone server's JetStream stores.
func (c *natsCluster) storeDir() string {
	return filepath.Join(filepath.Dir(c.auth), c.servers[0].Name)
}

// jszStore is what a server's /jsz says of its file store: bytes used and
// its limit.
func (s *natsServer) jszStore() string {
	code, body, err := s.get("/jsz")
	if err != nil || code != http.StatusOK {
		return fmt.Sprintf("/jsz: %d %v", code, err)
	}
	i := strings.Index(body, `"storage"`)
	if i < 0 {
		return body
	}
	return body[i:min(len(body), i+120)]
}

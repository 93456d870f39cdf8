package deploy_test

// End to end: the compose and Kubernetes layouts run against three NATS
// servers started here from the deployments' own configurations, with the
// credentials, tokens and certificates they are given, and toolgate's
// commands as the deployments write them. Only what cannot run here
// changes: the servers' ports and routes move to loopback, the data to
// temporary directories, and the paths the mounts provide to where this
// test laid them out.

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/toolgate/toolgate/internal/bus/bustest"
)

// startNATS starts a server for each configuration, as a cluster on
// loopback whose routes dial host; it returns the client URLs, with
// scheme, host and each server's port.
func startNATS(t *testing.T, confs []*natsserver.Options, scheme, host string) []string {
	t.Helper()
	routePorts := make([]int, len(confs))
	for i := range confs {
		routePorts[i] = bustest.FreePort(t)
	}
	var routes []*url.URL
	for _, p := range routePorts {
		routes = append(routes, &url.URL{Scheme: "nats-route", Host: net.JoinHostPort(host, strconv.Itoa(p))})
	}
	var urls []string
	for i, o := range confs {
		o.Host, o.Port = "127.0.0.1", natsserver.RANDOM_PORT
		o.HTTPHost, o.HTTPPort = "", 0
		o.Cluster.Host, o.Cluster.Port = "127.0.0.1", routePorts[i]
		o.Routes = routes
		o.StoreDir = t.TempDir()
		o.NoLog, o.NoSigs = true, true
		s, err := natsserver.NewServer(o)
		if err != nil {
			t.Fatalf("nats server %s: %v", o.ServerName, err)
		}
		s.Start()
		t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
		// A minute, as the embedded server waits: a cluster with TLS and
		// JetStream starting beside the rest of the suite is slow to be.
		if !s.ReadyForConnections(time.Minute) {
			t.Fatalf("nats server %s: not ready after a minute", o.ServerName)
		}
		port := s.Addr().(*net.TCPAddr).Port
		urls = append(urls, scheme+"://"+net.JoinHostPort(host, strconv.Itoa(port)))
	}
	return urls
}

// waitJetStream waits until the cluster's JetStream answers an account
// holding creds.
func waitJetStream(t *testing.T, urls []string, opts ...nats.Option) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		nc, err := nats.Connect(strings.Join(urls, ","), opts...)
		if err == nil {
			js, _ := jetstream.New(nc)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err = js.AccountInfo(ctx)
			cancel()
			nc.Close()
			if err == nil {
				return
			}
		}
		last = err
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("the cluster's JetStream does not answer: %v", last)
}

// checkAnonymousRefused checks that a client without a credential cannot
// connect.
func checkAnonymousRefused(t *testing.T, urls []string, opts ...nats.Option) {
	t.Helper()
	for _, u := range urls {
		nc, err := nats.Connect(u, append(opts, nats.MaxReconnects(0), nats.NoReconnect())...)
		if err == nil {
			nc.Close()
			t.Errorf("%s: an anonymous client connected", u)
		} else if !strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
			t.Errorf("%s: an anonymous client: %v, want an authorization violation", u, err)
		}
	}
}

// proc is a toolgate process this test runs, restarted when it exits as
// compose (restart: unless-stopped) and Kubernetes do.
type proc struct {
	where  string
	http   string          // its HTTP API's address, if it serves one
	stderr *bustest.Buffer // of every run, each exit noted
	stop   chan struct{}
	done   chan struct{}

	mu       sync.Mutex
	restarts int
	run      int // the offset in stderr where the current run's output starts
}

// serving reports whether the current run says it serves.
func (p *proc) serving() bool {
	p.mu.Lock()
	from := p.run
	p.mu.Unlock()
	out := p.stderr.String()
	return len(out) >= from && strings.Contains(out[from:], "toolgate serving")
}

// startToolgate runs toolgate with args and env until the test ends.
// hostArgs turns a container's toolgate command line into one for this
// machine: the test's NATS servers, a free HTTP address (returned), and
// container paths as the files the test laid out for them.
func hostArgs(t *testing.T, args, urls []string, fs containerFS) ([]string, string) {
	var addr string
	host := withFlags(args, func(flag, v string) string {
		switch {
		case flag == "nats":
			return strings.Join(urls, ",")
		case flag == "http":
			addr = httpAddr(t)
			return addr
		case strings.HasPrefix(v, "/"):
			return fs.path(v)
		}
		return v
	})
	return host, addr
}

func startToolgate(t *testing.T, where string, args []string, env map[string]string) *proc {
	t.Helper()
	p := &proc{where: where, stderr: &bustest.Buffer{}, stop: make(chan struct{}), done: make(chan struct{})}
	home, dir := t.TempDir(), t.TempDir()
	start := func() (*exec.Cmd, chan error, error) {
		cmd := exec.Command(toolgate(t).path, args...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home}
		for k, v := range env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		cmd.Dir = dir
		cmd.Stderr = p.stderr
		if err := cmd.Start(); err != nil {
			return nil, nil, err
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		return cmd, exited, nil
	}
	cmd, exited, err := start()
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	go func() {
		defer close(p.done)
		for {
			select {
			case <-p.stop:
				_ = cmd.Process.Signal(os.Interrupt)
				select {
				case <-exited:
				case <-time.After(10 * time.Second):
					_ = cmd.Process.Kill()
					<-exited
				}
				return
			case err := <-exited:
				fmt.Fprintf(p.stderr, "--- exited (%v); restarting\n", err)
				select {
				case <-p.stop:
					return
				case <-time.After(time.Second):
				}
				p.mu.Lock()
				p.restarts++
				p.run = len(p.stderr.String())
				p.mu.Unlock()
				if cmd, exited, err = start(); err != nil {
					fmt.Fprintf(p.stderr, "--- cannot restart: %v\n", err)
					return
				}
			}
		}
	}()
	t.Cleanup(func() {
		close(p.stop)
		<-p.done
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.restarts > 0 {
			t.Logf("%s was restarted %d times", p.where, p.restarts)
		}
	})
	return p
}

// waitReady waits until every process serves (and those serving HTTP
// answer /readyz).
func waitReady(t *testing.T, procs ...*proc) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for _, p := range procs {
		for {
			ready := p.serving()
			if ready && p.http != "" {
				resp, err := http.Get("http://" + p.http + "/readyz")
				ready = err == nil && resp.StatusCode == http.StatusOK
				if err == nil {
					resp.Body.Close()
				}
			}
			if ready {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s does not get ready:\n%s", p.where, p.stderr.String())
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
}

// checkToken checks that the HTTP API answers the token and refuses a
// request without one.
func checkToken(t *testing.T, addr string, tokens []byte) {
	t.Helper()
	token := strings.Fields(string(tokens))[0]
	for _, auth := range []string{"", "Bearer " + token} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/v1/me", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if want := map[bool]int{true: http.StatusUnauthorized, false: http.StatusOK}[auth == ""]; resp.StatusCode != want {
			t.Errorf("GET %s/v1/me with %q: %d, want %d", addr, map[bool]string{true: "no token", false: "the generated token"}[auth == ""], resp.StatusCode, want)
		}
	}
}

// runCLI runs a toolgate CLI command.
func runCLI(t *testing.T, env map[string]string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, toolgate(t).path, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// checkIssue issues alice an approver credential through the gateway as
// README.md shows (with the gateway's data directory, whose admin
// credential the CLI uses), and checks that it works and that a CLI
// without one is refused.
func checkIssue(t *testing.T, urls, data string, env map[string]string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "alice.creds")
	out, err := runCLI(t, env, "creds", "add", "--nats", urls, "--data", data, "--user", "alice", "--role", "approver", "--out", file)
	if err != nil {
		t.Fatalf("toolgate creds add through the gateway: %v\n%s", err, out)
	}
	if out, err := runCLI(t, env, "pending", "--nats", urls, "--nats-creds", file); err != nil {
		t.Errorf("toolgate pending with the issued credential: %v\n%s", err, out)
	}
	out, err = runCLI(t, env, "pending", "--nats", urls)
	if err == nil || !strings.Contains(strings.ToLower(out), "authorization violation") {
		t.Errorf("toolgate pending without a credential: %v, want an authorization violation:\n%s", err, out)
	}
}

// httpAddr is a free loopback address for an --http flag.
func httpAddr(t *testing.T) string {
	return "127.0.0.1:" + strconv.Itoa(bustest.FreePort(t))
}

func TestComposeEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a NATS cluster and every toolgate service")
	}
	t.Parallel() // mostly waiting for the cluster: beside the other one
	c := loadCompose(t)
	vol := composeInit(t, c)
	var confs []*natsserver.Options
	for i := 1; i <= 3; i++ {
		conf, fs := c.natsConfig(t, fmt.Sprintf("nats-%d", i), vol)
		opts, err := natsserver.ProcessConfigFile(fs.path(conf))
		if err != nil {
			t.Fatal(err)
		}
		confs = append(confs, opts)
	}
	urls := startNATS(t, confs, "nats", "127.0.0.1")
	checkAnonymousRefused(t, urls)
	waitJetStream(t, urls, nats.UserCredentials(filepath.Join(vol, "creds", "toolgate.creds")))

	// Start the services as compose does: each once the toolgate
	// services it depends on are started (or healthy, if it says so).
	procs := map[string]*proc{}
	var gateway *proc
	var gatewayData string
	pending := map[string]bool{}
	for name, svc := range c.services {
		if strings.HasPrefix(str(svc, "image"), "toolgate") && name != composeInitService {
			pending[name] = true
		}
	}
	for len(pending) > 0 {
		var next []string
		for name := range pending {
			ok := true
			for dep := range mapping(c.services[name], "depends_on") {
				if pending[dep] {
					ok = false
				}
			}
			if ok {
				next = append(next, name)
			}
		}
		if len(next) == 0 {
			t.Fatalf("compose.yaml: the toolgate services depend on each other in a circle: %v", pending)
		}
		slices.Sort(next)
		for _, name := range next {
			for dep := range mapping(c.services[name], "depends_on") {
				if p := procs[dep]; p != nil && str(c.services[name], "depends_on", dep, "condition") == "service_healthy" {
					waitReady(t, p)
				}
			}
			svc := c.services[name]
			fs := c.layout(t, name, vol)
			env := map[string]string{}
			for k, v := range mapping(svc, "environment") {
				if strings.HasPrefix(k, "TOOLGATE_") {
					env[k] = str(v)
				}
			}
			args, addr := hostArgs(t, strs(svc, "command"), urls, fs)
			p := startToolgate(t, "compose.yaml: service "+name, args, env)
			p.http = addr
			procs[name] = p
			if s := parseServe(t, name, strs(svc, "command"), env); s.runs("intake") {
				gateway, gatewayData = p, fs.path(s.flags["data"])
			}
		}
		for _, name := range next {
			delete(pending, name)
		}
	}
	if gateway == nil {
		t.Fatal("compose.yaml: no service runs the intake")
	}
	for _, p := range procs {
		waitReady(t, p)
	}
	tokens, err := os.ReadFile(filepath.Join(vol, "http", "tokens"))
	if err != nil {
		t.Fatal(err)
	}
	checkToken(t, gateway.http, tokens)
	checkIssue(t, strings.Join(urls, ","), gatewayData, nil)
}

func TestK8sEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a NATS cluster and every toolgate Deployment")
	}
	t.Parallel() // mostly waiting for the cluster: beside the other one
	objs := k8sObjects(t)
	secrets := k8sSecrets(t, objs)
	sts, _ := natsStatefulSet(t, objs)
	n, _ := get(sts.doc, "spec", "replicas").(int)
	var confs []*natsserver.Options
	for i := range n {
		path, _, env := natsPodConf(t, objs, secrets, i)
		opts, err := processConfig(path, env)
		if err != nil {
			t.Fatal(err)
		}
		confs = append(confs, opts)
	}
	// localhost: one of the certificate's names, which routes and clients
	// verify.
	urls := startNATS(t, confs, "tls", "localhost")
	var ca string
	for _, v := range list(sts.doc, "spec", "template", "spec", "volumes") {
		for _, src := range volumeSources(v) {
			if f := secrets[secretName(src)]["ca.crt"]; f != "" {
				ca = f // the CA of the certificate the servers present
			}
		}
	}
	checkAnonymousRefused(t, urls, nats.RootCAs(ca))
	waitJetStream(t, urls, nats.RootCAs(ca), nats.UserCredentials(secrets["toolgate-auth"]["toolgate.creds"]))

	var procs []*proc
	var gateway *proc
	var gatewayData string
	var gatewayEnv map[string]string
	for _, o := range objs {
		if o.kind() != "Deployment" {
			continue
		}
		for _, c := range list(o.doc, "spec", "template", "spec", "containers") {
			if !strings.HasPrefix(str(c, "image"), "toolgate") {
				continue
			}
			fs := k8sPodFS(t, objs, o, c, secrets)
			env := map[string]string{}
			for _, e := range list(c, "env") {
				if name := str(e, "name"); strings.HasPrefix(name, "TOOLGATE_") {
					env[name] = str(e, "value")
				} else if name == "SSL_CERT_DIR" {
					var dirs []string
					for _, d := range strings.Split(str(e, "value"), ":") {
						dirs = append(dirs, fs.path(d))
					}
					env[name] = strings.Join(dirs, ":")
				}
			}
			args, addr := hostArgs(t, strs(c, "args"), urls, fs)
			// All at once, as Kubernetes starts them.
			started := startToolgate(t, o.String(), args, env)
			started.http = addr
			procs = append(procs, started)
			if s := parseServe(t, o.String(), strs(c, "args"), nil); s.runs("intake") {
				gateway, gatewayData, gatewayEnv = started, fs.path(s.flags["data"]), env
			}
		}
	}
	if gateway == nil {
		t.Fatal("k8s: no Deployment runs the intake")
	}
	waitReady(t, procs...)
	tokens, err := os.ReadFile(secrets["toolgate-tokens"]["tokens"])
	if err != nil {
		t.Fatal(err)
	}
	checkToken(t, gateway.http, tokens)
	// As `kubectl exec deploy/toolgate-gateway -- toolgate creds add …`
	// does: in the gateway's environment, which trusts the CA.
	checkIssue(t, strings.Join(urls, ","), gatewayData, map[string]string{"SSL_CERT_DIR": gatewayEnv["SSL_CERT_DIR"]})
}

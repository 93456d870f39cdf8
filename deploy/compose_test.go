package deploy_test

import (
	"bytes"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	natsserver "github.com/nats-io/nats-server/v2/server"
)

// composeNATS is the --nats every toolgate service in compose.yaml gives.
const composeNATS = "nats://nats-1:4222,nats://nats-2:4222,nats://nats-3:4222"

// composeInitService creates the trust chain, the credentials, the NATS
// servers' nats-auth.conf and the HTTP tokens, in the volume composeAuth.
const (
	composeInitService = "auth-init"
	composeAuth        = "auth"
)

// credentialNames are the credentials serve and `creds init` make: its
// own and one per role.
var credentialNames = []string{"toolgate", "agent", "executor", "approver", "viewer", "admin"}

// composeFile is compose.yaml, decoded.
type composeFile struct {
	services map[string]any
	volumes  map[string]any
}

func loadCompose(t *testing.T) *composeFile {
	t.Helper()
	docs, err := yamlDocs("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) != 1 {
		t.Fatalf("compose.yaml: %d documents, want 1", len(docs))
	}
	c := &composeFile{services: mapping(docs[0], "services"), volumes: mapping(docs[0], "volumes")}
	if len(c.services) == 0 {
		t.Fatal("compose.yaml: no services")
	}
	return c
}

// mount is one entry of a service's volumes, in either syntax.
type mount struct {
	bind     bool   // a file or directory of this repository, not a named volume
	source   string // the path (relative to deploy/) or the volume's name
	subpath  string // within the volume
	target   string
	readOnly bool
}

func (c *composeFile) mounts(t *testing.T, name string) []mount {
	t.Helper()
	var out []mount
	for _, v := range list(c.services[name], "volumes") {
		var m mount
		switch x := v.(type) {
		case string:
			parts := strings.Split(x, ":")
			if len(parts) < 2 {
				t.Errorf("compose.yaml: service %s: volume %q has no target", name, x)
				continue
			}
			m = mount{source: parts[0], target: parts[1]}
			if len(parts) > 2 {
				m.readOnly = slices.Contains(strings.Split(parts[2], ","), "ro")
			}
			m.bind = strings.HasPrefix(m.source, ".") || strings.HasPrefix(m.source, "/")
		case map[string]any:
			m = mount{source: str(x, "source"), target: str(x, "target"), subpath: str(x, "volume", "subpath"), readOnly: get(x, "read_only") == true}
			switch str(x, "type") {
			case "bind":
				m.bind = true
			case "volume":
			default:
				t.Errorf("compose.yaml: service %s: volume of type %q", name, str(x, "type"))
				continue
			}
		default:
			t.Errorf("compose.yaml: service %s: volume %v is neither a string nor a mapping", name, v)
			continue
		}
		if m.target == "" || !strings.HasPrefix(m.target, "/") {
			t.Errorf("compose.yaml: service %s: volume %s: target %q is not an absolute path", name, m.source, m.target)
			continue
		}
		out = append(out, m)
	}
	return out
}

// containerFS is a container's file system as a test lays it out: under
// root, each mount target is a symbolic link to what is mounted there.
type containerFS struct {
	root    string
	targets map[string]string // mount target → the host path mounted
}

// path is where this test keeps what the container sees at p: under root
// if a mount covers p, else p itself.
func (f containerFS) path(p string) string {
	for target := range f.targets {
		if p == target || strings.HasPrefix(p, target+"/") {
			return filepath.Join(f.root, p)
		}
	}
	return p
}

// source is the host path a container path is read from, relative to
// deploy/ when it is in this repository.
func (f containerFS) source(p string) string {
	for target, host := range f.targets {
		if rest, ok := strings.CutPrefix(p, target); ok && (rest == "" || strings.HasPrefix(rest, "/")) {
			full := filepath.Join(host, rest)
			if wd, err := os.Getwd(); err == nil {
				if rel, err := filepath.Rel(wd, full); err == nil && !strings.HasPrefix(rel, "..") {
					return rel
				}
			}
			return full
		}
	}
	return ""
}

// newContainerFS lays out the mounts under a new root: targets, the host
// paths mounted there.
func newContainerFS(t *testing.T, where string, targets map[string]string) containerFS {
	t.Helper()
	f := containerFS{root: t.TempDir(), targets: targets}
	for target, host := range targets {
		for other := range targets {
			if other != target && strings.HasPrefix(target, other+"/") {
				t.Errorf("%s: mount %s is inside mount %s", where, target, other)
			}
		}
		link := filepath.Join(f.root, target)
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(host, link); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// layout lays out a compose service's mounts: files of this repository,
// the volume composeAuth as vol holds it (a subpath must exist there, as
// Docker requires), and empty directories for other volumes.
func (c *composeFile) layout(t *testing.T, name, vol string) containerFS {
	t.Helper()
	where := "compose.yaml: service " + name
	targets := map[string]string{}
	for _, m := range c.mounts(t, name) {
		var host string
		switch {
		case m.bind:
			abs, err := filepath.Abs(m.source)
			if err != nil {
				t.Fatal(err)
			}
			host = abs
		case m.source == composeAuth:
			host = filepath.Join(vol, m.subpath)
		default:
			host = t.TempDir()
		}
		if _, err := os.Stat(host); err != nil {
			t.Errorf("%s mounts %s at %s: %v", where, m.source, m.target, err)
			continue
		}
		targets[m.target] = host
	}
	return newContainerFS(t, where, targets)
}

// natsConfig is where a compose NATS service reads its configuration, and
// its file system.
func (c *composeFile) natsConfig(t *testing.T, name, vol string) (string, containerFS) {
	t.Helper()
	cmd := strs(c.services[name], "command")
	ci := slices.Index(cmd, "--config")
	if ci < 0 || ci+1 >= len(cmd) {
		t.Errorf("compose.yaml: %s: command %q gives no --config", name, cmd)
		return "", containerFS{}
	}
	return cmd[ci+1], c.layout(t, name, vol)
}

// initScript is the auth-init service's shell script as the shell gets it,
// and the target its volume is mounted at.
func (c *composeFile) initScript(t *testing.T) (script, target string) {
	t.Helper()
	svc := c.services[composeInitService]
	if svc == nil {
		t.Fatalf("compose.yaml: no service %s", composeInitService)
	}
	where := "compose.yaml: service " + composeInitService
	if !strings.HasPrefix(str(svc, "image"), "toolgate") {
		t.Errorf("%s: image %q, want toolgate's", where, str(svc, "image"))
	}
	if ep := strs(svc, "entrypoint"); !slices.Equal(ep, []string{"/bin/sh", "-c"}) {
		t.Fatalf("%s: entrypoint %q, want [/bin/sh -c]", where, ep)
	}
	cmd := strs(svc, "command")
	if len(cmd) != 1 {
		t.Fatalf("%s: want the script as the command's one element, got %d", where, len(cmd))
	}
	// Compose interpolates $VAR and ${VAR}; $$ is a literal $.
	if lone := regexp.MustCompile(`\$\$|\$`).FindAllString(cmd[0], -1); slices.Contains(lone, "$") {
		t.Errorf("%s: the script has a $ that compose would interpolate: write $$", where)
	}
	script = strings.ReplaceAll(cmd[0], "$$", "$")
	ms := c.mounts(t, composeInitService)
	if len(ms) != 1 || ms[0].bind || ms[0].source != composeAuth || ms[0].readOnly || ms[0].subpath != "" {
		t.Fatalf("%s: want one mount, the volume %s whole and writable; got %+v", where, composeAuth, ms)
	}
	if str(svc, "user") != "" {
		t.Errorf("%s: user %q: run it as the image's user, who then owns the volume's files", where, str(svc, "user"))
	}
	return script, ms[0].target
}

// runInit runs the auth-init script with vol as its volume and the toolgate
// built here on its PATH.
func (c *composeFile) runInit(t *testing.T, vol string) {
	t.Helper()
	script, target := c.initScript(t)
	re := regexp.MustCompile(`(^|[\s=>'"])` + regexp.QuoteMeta(target) + `(/|[\s'";]|$)`)
	script = re.ReplaceAllString(script, "${1}"+vol+"${2}")
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Env = []string{"PATH=" + filepath.Dir(toolgate(t).path) + string(os.PathListSeparator) + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	cmd.Dir = t.TempDir()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("compose.yaml: service %s: %v\n%s", composeInitService, err, out)
	}
}

// composeInit runs the auth-init service's script once in a new directory,
// which then holds what the volume composeAuth holds after `up`.
func composeInit(t *testing.T, c *composeFile) string {
	t.Helper()
	vol := t.TempDir()
	c.runInit(t, vol)
	return vol
}

func TestComposeInit(t *testing.T) {
	t.Parallel()
	c := loadCompose(t)
	vol := composeInit(t, c)

	// What it made, readable by its owner only where secret.
	secret := []string{"auth/keys.json", "http/tokens"}
	for _, n := range credentialNames {
		secret = append(secret, "creds/"+n+".creds")
	}
	for _, rel := range append(slices.Clone(secret), "nats/nats-auth.conf") {
		fi, err := os.Stat(filepath.Join(vol, rel))
		if err != nil {
			t.Errorf("compose.yaml: %s made no %s: %v", composeInitService, rel, err)
			continue
		}
		if slices.Contains(secret, rel) && fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("compose.yaml: %s: %s has mode %v, want it readable by its owner only", composeInitService, rel, fi.Mode().Perm())
		}
	}
	tokens, err := os.ReadFile(filepath.Join(vol, "http", "tokens"))
	if err == nil {
		checkTokens(t, "the tokens "+composeInitService+" made", tokens)
		if f := strings.Fields(string(tokens)); len(f) != 3 || !regexp.MustCompile(`^[0-9a-f]{48}$`).MatchString(f[0]) || f[1] != "admin" || f[2] != "admin" {
			t.Errorf("compose.yaml: %s: tokens %d fields, want one line: 48 random hex digits, admin admin", composeInitService, len(f))
		}
	}

	// Idempotent: a second `up` keeps the keys, credentials and tokens, and
	// writes a nats-auth.conf for the same operator and accounts.
	before := snapshot(t, vol)
	confBefore := trustOf(t, filepath.Join(vol, "nats", "nats-auth.conf"))
	c.runInit(t, vol)
	after := snapshot(t, vol)
	for rel, data := range before {
		if rel == "nats/nats-auth.conf" {
			continue
		}
		if !bytes.Equal(after[rel], data) {
			t.Errorf("compose.yaml: %s run again changed %s", composeInitService, rel)
		}
	}
	for rel := range after {
		if _, ok := before[rel]; !ok {
			t.Errorf("compose.yaml: %s run again left %s behind", composeInitService, rel)
		}
	}
	if got := trustOf(t, filepath.Join(vol, "nats", "nats-auth.conf")); got != confBefore {
		t.Errorf("compose.yaml: %s run again trusts another operator or accounts:\n%s\nthen\n%s", composeInitService, confBefore, got)
	}
	// A second toolgate generation of the tokens would differ: there is one.
	if !bytes.Equal(before["http/tokens"], after["http/tokens"]) {
		t.Errorf("compose.yaml: %s run again replaced the tokens", composeInitService)
	}

	// The image lets the init service write its volume: a fresh named
	// volume takes its owner from the image's directory at the mount point.
	_, target := c.initScript(t)
	created, owned := false, false
	for _, in := range dockerfile(t) {
		if in.cmd != "RUN" {
			continue
		}
		for _, part := range strings.Split(in.args, "&&") {
			f := strings.Fields(part)
			if len(f) > 0 && f[0] == "mkdir" && slices.Contains(f, target) {
				created = true
			}
			if len(f) > 2 && f[0] == "chown" && strings.HasPrefix(f[1], "toolgate") && slices.Contains(f, target) {
				owned = true
			}
		}
	}
	if !created || !owned {
		t.Errorf("Dockerfile: want %s created and owned by toolgate (mkdir %v, chown %v): %s mounts its volume there", target, created, owned, composeInitService)
	}
}

// snapshot reads every file under dir, by slash-separated relative path.
func snapshot(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		out[filepath.ToSlash(rel)] = data
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// trustOf describes whom a nats-auth.conf trusts: its operator, system
// account and the accounts it preloads.
func trustOf(t *testing.T, path string) string {
	t.Helper()
	opts, err := natsserver.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var b strings.Builder
	for _, op := range opts.TrustedOperators {
		fmt.Fprintf(&b, "operator %s\n", op.Subject)
	}
	fmt.Fprintf(&b, "system account %s\n", opts.SystemAccount)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	accounts := regexp.MustCompile(`(?m)^\s+(A[A-Z2-7]{55}):`).FindAllStringSubmatch(string(data), -1)
	for _, a := range accounts {
		fmt.Fprintf(&b, "account %s\n", a[1])
	}
	return b.String()
}

func TestCompose(t *testing.T) {
	c := loadCompose(t)
	vol := composeInit(t, c)

	// Every local file a service mounts exists; every named volume is
	// declared; every dependency is a service; only loopback publishes.
	for name, svc := range c.services {
		for _, m := range c.mounts(t, name) {
			if m.bind {
				if _, err := os.Stat(m.source); err != nil {
					t.Errorf("compose.yaml: service %s mounts %s: %v", name, m.source, err)
				}
			} else if _, ok := c.volumes[m.source]; !ok {
				t.Errorf("compose.yaml: service %s: volume %s is not declared", name, m.source)
			}
			if m.source == composeAuth && name != composeInitService && !m.readOnly {
				t.Errorf("compose.yaml: service %s mounts %s writable: only %s writes it", name, composeAuth, composeInitService)
			}
		}
		for dep := range mapping(svc, "depends_on") {
			if _, ok := c.services[dep]; !ok {
				t.Errorf("compose.yaml: service %s depends on %s, which is not a service", name, dep)
			}
		}
		for _, p := range strs(svc, "ports") {
			if !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("compose.yaml: service %s publishes %q beyond this machine's loopback", name, p)
			}
		}
		if name != composeInitService && str(svc, "depends_on", composeInitService, "condition") != "service_completed_successfully" {
			t.Errorf("compose.yaml: service %s: want depends_on %s: condition: service_completed_successfully", name, composeInitService)
		}
	}

	// The NATS cluster: nats-1..3, each with its own configuration and the
	// generated nats-auth.conf, and nothing else of the volume.
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("nats-%d", i)
		svc := c.services[name]
		if svc == nil {
			t.Errorf("compose.yaml: no service %s", name)
			continue
		}
		if img := str(svc, "image"); !strings.HasPrefix(img, "nats:2.12") {
			t.Errorf("compose.yaml: %s image %q, want nats:2.12", name, img)
		}
		conf, fs := c.natsConfig(t, name, vol)
		if want := filepath.Join("nats", name+".conf"); conf != "" && fs.source(conf) != want {
			t.Errorf("compose.yaml: %s: --config %s is mounted from %q, want %s", name, conf, fs.source(conf), want)
		}
		for _, m := range c.mounts(t, name) {
			if m.source == composeAuth && m.subpath != "nats" {
				t.Errorf("compose.yaml: %s mounts %s with subpath %q: a NATS server needs its nats/ only, not the keys and credentials", name, composeAuth, m.subpath)
			}
		}
		if !strings.Contains(strings.Join(strs(svc, "healthcheck", "test"), " "), "/healthz") {
			t.Errorf("compose.yaml: %s: want a healthcheck on the monitoring port's /healthz", name)
		}
	}

	// toolgate, split into role groups.
	creds, err := os.ReadFile(filepath.Join(vol, "creds", "toolgate.creds"))
	if err != nil {
		t.Fatal(err)
	}
	var cmds []serveArgs
	for name, svc := range c.services {
		if !strings.HasPrefix(str(svc, "image"), "toolgate") || name == composeInitService {
			continue
		}
		where := "compose.yaml: service " + name
		if df := str(svc, "build", "dockerfile"); df != "" {
			if _, err := os.Stat(filepath.Join(str(svc, "build", "context"), df)); err != nil {
				t.Errorf("%s: build: %v", where, err)
			}
		}
		env := map[string]string{}
		for k, v := range mapping(svc, "environment") {
			if strings.HasPrefix(k, "TOOLGATE_") {
				env[k] = str(v)
			}
		}
		fs := c.layout(t, name, vol)
		s := checkServe(t, where, strs(svc, "command"), env, fs.path)
		cmds = append(cmds, s)
		if s.flags["nats"] != composeNATS {
			t.Errorf("%s: --nats %q, want %s", where, s.flags["nats"], composeNATS)
		}
		if s.flags["replicas"] != "3" {
			t.Errorf("%s: --replicas %q, want 3", where, s.flags["replicas"])
		}
		// toolgate's own credential, from the volume.
		if got, err := os.ReadFile(fs.path(s.flags["nats-creds"])); s.flags["nats-creds"] == "" || err != nil || !bytes.Equal(got, creds) {
			t.Errorf("%s: --nats-creds %q is not the volume's creds/toolgate.creds (%v)", where, s.flags["nats-creds"], err)
		}
		// The keys: where the intake runs (it issues credentials), nowhere else.
		keys := fs.path(s.flags["data"] + "/auth/keys.json")
		_, err := os.Stat(keys)
		switch {
		case s.runs("intake") && (s.flags["data"] == "" || err != nil):
			t.Errorf("%s runs the intake: want --data where the volume's auth/keys.json is mounted, so that `toolgate creds add` works (%v)", where, err)
		case !s.runs("intake"):
			for _, m := range c.mounts(t, name) {
				if m.source == composeAuth && (m.subpath == "" || m.subpath == "auth") {
					t.Errorf("%s does not issue credentials but mounts the signing keys (volume %s, subpath %q)", where, composeAuth, m.subpath)
				}
			}
		}
		for _, n := range []string{"nats-1", "nats-2", "nats-3"} {
			if str(svc, "depends_on", n, "condition") != "service_healthy" {
				t.Errorf("%s: want depends_on %s: condition: service_healthy", where, n)
			}
		}
		if str(svc, "read_only") != "true" {
			t.Errorf("%s: want read_only: true", where)
		}
		if s.runs("http") {
			if !strings.Contains(strings.Join(strs(svc, "healthcheck", "test"), " "), "/readyz") {
				t.Errorf("%s runs the http role: want a healthcheck on /readyz", where)
			}
			if _, port, err := net.SplitHostPort(s.flags["http"]); err != nil || !strings.Contains(strings.Join(strs(svc, "healthcheck", "test"), " "), ":"+port+"/") {
				t.Errorf("%s: the healthcheck does not ask --http %q", where, s.flags["http"])
			}
			// Tokens: generated into the volume by auth-init.
			data, err := os.ReadFile(fs.path(s.flags["tokens"]))
			if s.flags["tokens"] == "" || err != nil {
				t.Errorf("%s serves HTTP on %s: want --tokens naming the tokens %s made (%v)", where, s.flags["http"], composeInitService, err)
			} else {
				checkTokens(t, where+": --tokens", data)
			}
		}
		if s.runs("executor") && !s.runs("all") && s.flags["tools"] != "http" {
			t.Errorf("%s runs the executor role: want --tools http, got %q", where, s.flags["tools"])
		}
		if s.runs("timer") && !s.runs("all") {
			if n, _ := strconv.Atoi(str(svc, "deploy", "replicas")); n < 2 {
				t.Errorf("%s runs the timer: want deploy.replicas >= 2", where)
			}
		}
	}
	checkRolesCovered(t, "compose.yaml", cmds)
}

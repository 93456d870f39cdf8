// Package deploy_test checks the deployment files in deploy/: the image,
// the compose file, the NATS configurations and the Kubernetes manifests.
// Nothing here runs a container; the files are parsed, cross-checked, and
// every toolgate command line in them is handed to a toolgate binary built
// from this tree, which must accept it.
package deploy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"go.yaml.in/yaml/v3"

	"github.com/toolgate/toolgate/api"
)

// composeNATS is the --nats every toolgate service in compose.yaml gives.
const composeNATS = "nats://nats-1:4222,nats://nats-2:4222,nats://nats-3:4222"

// ---------------------------------------------------------------------------
// The toolgate binary, built once from this tree

type toolgateBinary struct {
	path  string
	flags map[string]bool // serve's flag names
	roles []string        // the roles serve knows
}

var (
	buildOnce sync.Once
	built     *toolgateBinary
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if built != nil {
		os.RemoveAll(filepath.Dir(built.path))
	}
	os.Exit(code)
}

// toolgate builds cmd/toolgate once, stamping the version the way the
// Dockerfile does, and reads serve's flags and roles from `serve -h`.
func toolgate(t *testing.T) *toolgateBinary {
	t.Helper()
	buildOnce.Do(func() { built, buildErr = buildToolgate() })
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return built
}

// testVersion is stamped into the test binary through the Dockerfile's
// -X symbol; `toolgate version` must print it.
const testVersion = "deploy-test-version"

func buildToolgate() (_ *toolgateBinary, err error) {
	symbol, err := dockerfileVersionSymbol()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "toolgate-deploy-test")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	bin := filepath.Join(dir, "toolgate")
	// Built the way this test binary was (-race or not), the packages
	// both import come from the build cache.
	args := []string{"build"}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "-race" && s.Value == "true" {
				args = append(args, "-race")
			}
		}
	}
	args = append(args, "-ldflags", "-X "+symbol+"="+testVersion, "-o", bin, "../cmd/toolgate")
	build := exec.Command("go", args...)
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build ../cmd/toolgate: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("toolgate version: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), testVersion) {
		return nil, fmt.Errorf("Dockerfile stamps the version with -X %s, but a binary built so says %q: the symbol is wrong", symbol, out)
	}
	help, err := exec.Command(bin, "serve", "-h").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("toolgate serve -h: %v\n%s", err, help)
	}
	b := &toolgateBinary{path: bin, flags: map[string]bool{}}
	for _, m := range regexp.MustCompile(`(?m)^\s+-([a-z][a-z0-9-]*)`).FindAllStringSubmatch(string(help), -1) {
		b.flags[m[1]] = true
	}
	m := regexp.MustCompile(`comma-separated list of ([a-z,]+)`).FindStringSubmatch(string(help))
	if m == nil || len(b.flags) == 0 {
		return nil, fmt.Errorf("cannot read serve's flags and roles from its help:\n%s", help)
	}
	b.roles = strings.Split(m[1], ",")
	return b, nil
}

// serveArgs is one toolgate command line found in a deployment file.
type serveArgs struct {
	where string            // for messages
	args  []string          // starting with "serve"
	env   map[string]string // its TOOLGATE_* environment
	flags map[string]string // flag name → value
}

// roles lists the roles the command runs.
func (s serveArgs) roles() []string {
	v, ok := s.flags["roles"]
	if !ok {
		return []string{"all"}
	}
	var r []string
	for _, name := range strings.Split(v, ",") {
		r = append(r, strings.TrimSpace(name))
	}
	return r
}

func (s serveArgs) runs(role string) bool {
	r := s.roles()
	return slices.Contains(r, role) || slices.Contains(r, "all")
}

// checkServe checks a toolgate command line against the binary: every flag
// and TOOLGATE_* variable must be one serve has, and serve must accept the
// values. With --nats, it runs the command against a port nobody listens
// on: reaching "nats: connect" proves flags, environment and the config's
// validation all passed. Without, it runs it with -h appended, which parses
// the flags and stops.
func checkServe(t *testing.T, where string, args []string, env map[string]string) serveArgs {
	t.Helper()
	tg := toolgate(t)
	s := serveArgs{where: where, args: args, env: env, flags: map[string]string{}}
	if len(args) == 0 || args[0] != "serve" {
		t.Errorf("%s: command %q does not start with serve", where, args)
		return s
	}
	for i := 1; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			t.Errorf("%s: argument %q is not a flag (serve takes no arguments)", where, a)
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !tg.flags[name] {
			t.Errorf("%s: serve has no flag --%s", where, name)
			continue
		}
		if !hasValue { // every serve flag takes a value
			if i+1 >= len(args) {
				t.Errorf("%s: --%s has no value", where, name)
				continue
			}
			i++
			value = args[i]
		}
		s.flags[name] = value
	}
	for k := range env {
		name := strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(k, "TOOLGATE_")), "_", "-")
		if !tg.flags[name] {
			t.Errorf("%s: environment variable %s: serve has no flag --%s", where, k, name)
		}
	}
	for _, r := range s.roles() {
		if r != "all" && !slices.Contains(tg.roles, r) {
			t.Errorf("%s: unknown role %q (serve knows %s)", where, r, strings.Join(tg.roles, ","))
		}
	}
	if t.Failed() {
		return s
	}

	run := slices.Clone(args)
	_, cluster := s.flags["nats"]
	if cluster {
		for i, a := range run {
			switch {
			case strings.HasPrefix(a, "--nats=") || strings.HasPrefix(a, "-nats="):
				run[i] = "--nats=nats://127.0.0.1:" + strconv.Itoa(closedPort(t))
			case (a == "--nats" || a == "-nats") && i+1 < len(run):
				run[i+1] = "nats://127.0.0.1:" + strconv.Itoa(closedPort(t))
			}
		}
	} else {
		run = append(run, "-h")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, tg.path, run...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Dir = t.TempDir()
	err := cmd.Run()
	switch {
	case cluster && !strings.Contains(stderr.String(), "nats: connect"):
		t.Errorf("%s: toolgate %s refused the command before connecting (%v):\n%s", where, strings.Join(args, " "), err, stderr.String())
	case !cluster && err != nil:
		t.Errorf("%s: toolgate %s -h: %v:\n%s", where, strings.Join(args, " "), err, stderr.String())
	}
	return s
}

// closedPort returns a local port nothing listens on.
func closedPort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}

// checkRolesCovered checks that the commands, together, run every role.
func checkRolesCovered(t *testing.T, where string, cmds []serveArgs) {
	t.Helper()
	for _, role := range toolgate(t).roles {
		if !slices.ContainsFunc(cmds, func(s serveArgs) bool { return s.runs(role) }) {
			t.Errorf("%s: no toolgate runs the %s role", where, role)
		}
	}
}

// checkTokens checks a tokens file: it parses, configures at least one
// token, and every token says it is an example.
func checkTokens(t *testing.T, where string, data []byte) {
	t.Helper()
	tokens, err := api.ParseTokens(data)
	if err != nil {
		t.Errorf("%s: %v", where, err)
		return
	}
	if tokens.Open() {
		t.Errorf("%s: no tokens: the HTTP API would refuse to start on 0.0.0.0", where)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if tok := strings.Fields(line)[0]; !strings.Contains(tok, "example") {
			t.Errorf("%s: token %q does not look like an example: example tokens must say so", where, tok)
		}
	}
}

// ---------------------------------------------------------------------------
// Every YAML file

func TestYAMLParses(t *testing.T) {
	n := 0
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if ext := filepath.Ext(path); ext != ".yaml" && ext != ".yml" {
			return nil
		}
		n++
		if _, err := yamlDocs(path); err != nil {
			t.Error(err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no YAML files under deploy/")
	}
}

// yamlDocs decodes every document of a YAML file.
func yamlDocs(path string) ([]map[string]any, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []map[string]any
	for i := 1; ; i++ {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, i, err)
		}
		if doc != nil {
			docs = append(docs, doc)
		}
	}
	if len(docs) == 0 {
		return nil, fmt.Errorf("%s: no YAML document", path)
	}
	return docs, nil
}

// Small accessors for decoded YAML.

func get(v any, path ...string) any {
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func str(v any, path ...string) string {
	switch x := get(v, path...).(type) {
	case string:
		return x
	case nil:
		return ""
	default:
		return fmt.Sprint(x)
	}
}

func list(v any, path ...string) []any {
	l, _ := get(v, path...).([]any)
	return l
}

func strs(v any, path ...string) []string {
	var out []string
	for _, x := range list(v, path...) {
		out = append(out, str(x))
	}
	return out
}

func mapping(v any, path ...string) map[string]any {
	m, _ := get(v, path...).(map[string]any)
	return m
}

// ---------------------------------------------------------------------------
// Dockerfile

type instruction struct {
	line int
	cmd  string // upper case
	args string
}

func dockerfile(t *testing.T) []instruction {
	t.Helper()
	ins, err := parseDockerfile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	return ins
}

var dockerInstructions = []string{"ADD", "ARG", "CMD", "COPY", "ENTRYPOINT", "ENV", "EXPOSE", "FROM", "HEALTHCHECK", "LABEL", "ONBUILD", "RUN", "SHELL", "STOPSIGNAL", "USER", "VOLUME", "WORKDIR"}

// parseDockerfile reads instructions, joining continued lines and
// skipping comments, and refuses what is not an instruction.
func parseDockerfile(path string) ([]instruction, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []instruction
	var cur strings.Builder
	start := 0
	for i, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") || (trimmed == "" && cur.Len() == 0) {
			continue
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		if s, ok := strings.CutSuffix(trimmed, `\`); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(trimmed)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		cur.Reset()
		cmd = strings.ToUpper(cmd)
		if !slices.Contains(dockerInstructions, cmd) {
			return nil, fmt.Errorf("%s:%d: unknown instruction %q", path, start, cmd)
		}
		out = append(out, instruction{line: start, cmd: cmd, args: strings.TrimSpace(args)})
	}
	if cur.Len() > 0 {
		return nil, fmt.Errorf("%s: ends in a continued line", path)
	}
	return out, nil
}

// execForm decodes an exec-form (JSON array) CMD or ENTRYPOINT.
func execForm(t *testing.T, in instruction) []string {
	t.Helper()
	var v []string
	if err := json.Unmarshal([]byte(in.args), &v); err != nil {
		t.Errorf("Dockerfile:%d: %s must be in exec form (a JSON array of strings): %v", in.line, in.cmd, err)
	}
	return v
}

var versionSymbolRE = regexp.MustCompile(`-X\s+([\w./]+)=\$\{?VERSION\}?`)

func dockerfileVersionSymbol() (string, error) {
	data, err := os.ReadFile("Dockerfile")
	if err != nil {
		return "", err
	}
	m := versionSymbolRE.FindStringSubmatch(string(data))
	if m == nil {
		return "", errors.New(`Dockerfile: no -ldflags "-X main.version=${VERSION}" in the build`)
	}
	return m[1], nil
}

func TestDockerfile(t *testing.T) {
	ins := dockerfile(t)
	type stage struct {
		image, name string
		ins         []instruction
	}
	var stages []*stage
	for _, in := range ins {
		if in.cmd == "FROM" {
			f := strings.Fields(in.args)
			if len(f) != 1 && (len(f) != 3 || !strings.EqualFold(f[1], "AS")) {
				t.Fatalf("Dockerfile:%d: want FROM IMAGE [AS NAME], got FROM %s", in.line, in.args)
			}
			s := &stage{image: f[0]}
			if len(f) == 3 {
				s.name = f[2]
			}
			if !regexp.MustCompile(`^[a-z0-9][a-z0-9._/-]*(:[\w.-]+)?(@sha256:[0-9a-f]{64})?$`).MatchString(s.image) {
				t.Errorf("Dockerfile:%d: %q is not an image reference", in.line, s.image)
			}
			stages = append(stages, s)
			continue
		}
		if len(stages) == 0 {
			if in.cmd != "ARG" {
				t.Fatalf("Dockerfile:%d: %s before the first FROM", in.line, in.cmd)
			}
			continue
		}
		stages[len(stages)-1].ins = append(stages[len(stages)-1].ins, in)
	}
	if len(stages) < 2 {
		t.Fatalf("Dockerfile: %d stages, want a build stage and a runtime stage", len(stages))
	}
	builder, final := stages[0], stages[len(stages)-1]
	if !strings.HasPrefix(builder.image, "golang:1.26") {
		t.Errorf("Dockerfile: build stage FROM %s, want golang:1.26", builder.image)
	}
	if strings.HasPrefix(final.image, "golang") {
		t.Errorf("Dockerfile: the runtime stage is %s: want a small image", final.image)
	}

	// The build: -trimpath, the version from a build arg, ./cmd/toolgate.
	var build string
	argVersion := false
	for _, in := range builder.ins {
		if in.cmd == "ARG" && strings.HasPrefix(in.args, "VERSION") {
			argVersion = true
		}
		if in.cmd == "RUN" && strings.Contains(in.args, "go build") {
			build = in.args
			if !argVersion {
				t.Errorf("Dockerfile:%d: go build before ARG VERSION", in.line)
			}
		}
	}
	if build == "" {
		t.Fatal("Dockerfile: no go build in the build stage")
	}
	for _, want := range []string{"-trimpath", "CGO_ENABLED=0", "./cmd/toolgate"} {
		if !strings.Contains(build, want) {
			t.Errorf("Dockerfile: the go build lacks %s", want)
		}
	}
	if _, err := os.Stat("../cmd/toolgate/main.go"); err != nil {
		t.Errorf("Dockerfile builds ./cmd/toolgate: %v", err)
	}
	toolgate(t) // proves the -X symbol is main.version

	// The runtime stage.
	var user, entrypoint, cmd, copied []string
	var exposed, volumes []string
	env := map[string]string{}
	for _, in := range final.ins {
		switch in.cmd {
		case "USER":
			user = append(user, in.args)
		case "ENTRYPOINT":
			entrypoint = execForm(t, in)
		case "CMD":
			cmd = execForm(t, in)
		case "EXPOSE":
			exposed = append(exposed, strings.Fields(in.args)...)
		case "VOLUME":
			var v []string
			if err := json.Unmarshal([]byte(in.args), &v); err != nil {
				v = strings.Fields(in.args)
			}
			volumes = append(volumes, v...)
		case "ENV":
			k, v, ok := strings.Cut(in.args, "=")
			if !ok || strings.Contains(k, " ") {
				t.Errorf("Dockerfile:%d: want ENV KEY=VALUE, got %s", in.line, in.args)
			}
			env[k] = v
		case "COPY":
			if from, ok := strings.CutPrefix(in.args, "--from="); ok {
				copied = append(copied, strings.Fields(from)[0])
			}
		}
	}
	if len(user) == 0 || slices.ContainsFunc(user, func(u string) bool {
		name, _, _ := strings.Cut(u, ":")
		return name == "root" || name == "0"
	}) || user[len(user)-1] == "" {
		t.Errorf("Dockerfile: runtime USER %q: want a non-root user", user)
	}
	if !slices.Contains(copied, builder.name) {
		t.Errorf("Dockerfile: the runtime stage copies nothing from the build stage %q", builder.name)
	}
	for _, port := range []string{"4222", "8080"} {
		if !slices.Contains(exposed, port) {
			t.Errorf("Dockerfile: EXPOSE lacks %s", port)
		}
	}
	if !slices.Contains(volumes, "/data") {
		t.Errorf("Dockerfile: VOLUME %q lacks /data", volumes)
	}
	if len(entrypoint) != 1 || filepath.Base(entrypoint[0]) != "toolgate" {
		t.Errorf("Dockerfile: ENTRYPOINT %q, want [\"toolgate\"]", entrypoint)
	}
	toolgateEnv := map[string]string{}
	for k, v := range env {
		if strings.HasPrefix(k, "TOOLGATE_") {
			toolgateEnv[k] = v
		}
	}
	s := checkServe(t, "Dockerfile CMD", cmd, toolgateEnv)
	want := map[string]string{"data": "/data", "listen": "0.0.0.0:4222", "http": "0.0.0.0:8080"}
	for k, v := range want {
		if s.flags[k] != v {
			t.Errorf("Dockerfile CMD: --%s %q, want %q", k, s.flags[k], v)
		}
	}
	if s.flags["tokens"] == "" && s.flags["tokens-data"] == "" && toolgateEnv["TOOLGATE_TOKENS"] == "" && toolgateEnv["TOOLGATE_TOKENS_DATA"] == "" {
		t.Error("Dockerfile: the HTTP API listens on 0.0.0.0 but neither CMD nor ENV gives tokens: toolgate would refuse to start")
	}
}

// TestDockerignore checks that the build context keeps what the build needs.
func TestDockerignore(t *testing.T) {
	data, err := os.ReadFile("../.dockerignore")
	if errors.Is(err, os.ErrNotExist) {
		t.Skip("no .dockerignore")
	}
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if .Module}}{{if .Module.Main}}{{.Dir}}{{end}}{{end}}", "../cmd/toolgate").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	needed := []string{"go.mod", "go.sum"}
	for _, dir := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(root, dir)
		if err != nil {
			t.Fatal(err)
		}
		needed = append(needed, filepath.ToSlash(rel))
	}
	for _, pattern := range strings.Split(string(data), "\n") {
		pattern = strings.TrimSpace(pattern)
		if pattern == "" || strings.HasPrefix(pattern, "#") || strings.HasPrefix(pattern, "!") {
			continue
		}
		pattern = strings.TrimPrefix(pattern, "/")
		for _, path := range needed {
			// A pattern matching the path or any folder above it drops it.
			for p := path; p != "."; p = filepath.ToSlash(filepath.Dir(p)) {
				if ok, _ := filepath.Match(pattern, p); ok {
					t.Errorf(".dockerignore: %q leaves %s out of the build context", pattern, path)
				}
			}
		}
	}
}

// ---------------------------------------------------------------------------
// NATS configurations

// natsConf parses a NATS configuration with nats-server's own parser.
func natsConf(t *testing.T, where, path string, replicas int) *server.Options {
	t.Helper()
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	if opts.ServerName == "" {
		t.Errorf("%s: no server_name", where)
	}
	if !opts.JetStream || opts.StoreDir == "" {
		t.Errorf("%s: want jetstream with a store_dir (jetstream %v, store_dir %q)", where, opts.JetStream, opts.StoreDir)
	}
	if opts.Cluster.Name == "" || opts.Cluster.Port == 0 {
		t.Errorf("%s: want a named cluster with a listen port", where)
	}
	if len(opts.Routes) != replicas {
		t.Errorf("%s: %d routes, want one per server (%d)", where, len(opts.Routes), replicas)
	}
	if opts.HTTPPort == 0 {
		t.Errorf("%s: no monitoring port (http:)", where)
	}
	if opts.MaxPayload != 0 {
		t.Errorf("%s: max_payload %d: leave it at the default 1MB", where, opts.MaxPayload)
	}
	if opts.Port != 4222 {
		t.Errorf("%s: client port %d, want 4222", where, opts.Port)
	}
	return opts
}

func TestNATSConfs(t *testing.T) {
	paths, err := filepath.Glob("nats/*.conf")
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 3 {
		t.Fatalf("nats/: %d configurations, want 3", len(paths))
	}
	var first string
	for _, path := range paths {
		name := strings.TrimSuffix(filepath.Base(path), ".conf")
		opts := natsConf(t, path, path, 3)
		if opts.ServerName != name {
			t.Errorf("%s: server_name %q, want %q", path, opts.ServerName, name)
		}
		var hosts []string
		for _, r := range opts.Routes {
			hosts = append(hosts, r.Host)
		}
		if want := []string{"nats-1:6222", "nats-2:6222", "nats-3:6222"}; !slices.Equal(hosts, want) {
			t.Errorf("%s: routes %v, want %v", path, hosts, want)
		}
		// The three differ in their server_name only.
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var rest strings.Builder
		for _, line := range strings.Split(string(data), "\n") {
			if line = strings.TrimSpace(line); !strings.HasPrefix(line, "#") && !strings.HasPrefix(line, "server_name") {
				rest.WriteString(line + "\n")
			}
		}
		if first == "" {
			first = rest.String()
		} else if rest.String() != first {
			t.Errorf("%s differs from %s in more than its server_name", path, paths[0])
		}
	}
}

// ---------------------------------------------------------------------------
// compose.yaml

func TestCompose(t *testing.T) {
	docs, err := yamlDocs("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) != 1 {
		t.Fatalf("compose.yaml: %d documents, want 1", len(docs))
	}
	compose := docs[0]
	services := mapping(compose, "services")
	if len(services) == 0 {
		t.Fatal("compose.yaml: no services")
	}
	volumes := mapping(compose, "volumes")

	// Every local file a service mounts exists; every named volume is declared.
	for name, svc := range services {
		for _, v := range strs(svc, "volumes") {
			src, _, ok := strings.Cut(v, ":")
			if !ok {
				t.Errorf("compose.yaml: service %s: volume %q has no target", name, v)
				continue
			}
			if strings.HasPrefix(src, ".") || strings.HasPrefix(src, "/") {
				if _, err := os.Stat(src); err != nil {
					t.Errorf("compose.yaml: service %s mounts %s: %v", name, src, err)
				}
			} else if _, ok := volumes[src]; !ok {
				t.Errorf("compose.yaml: service %s: volume %s is not declared", name, src)
			}
		}
		for dep := range mapping(svc, "depends_on") {
			if _, ok := services[dep]; !ok {
				t.Errorf("compose.yaml: service %s depends on %s, which is not a service", name, dep)
			}
		}
	}

	// The NATS cluster: nats-1..3, each with its own configuration.
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("nats-%d", i)
		svc := services[name]
		if svc == nil {
			t.Errorf("compose.yaml: no service %s", name)
			continue
		}
		if img := str(svc, "image"); !strings.HasPrefix(img, "nats:2.12") {
			t.Errorf("compose.yaml: %s image %q, want nats:2.12", name, img)
		}
		cmd := strs(svc, "command")
		ci := slices.Index(cmd, "--config")
		if ci < 0 || ci+1 >= len(cmd) {
			t.Errorf("compose.yaml: %s: command %q gives no --config", name, cmd)
			continue
		}
		conf := ""
		for _, v := range strs(svc, "volumes") {
			parts := strings.Split(v, ":")
			if len(parts) >= 2 && parts[1] == cmd[ci+1] {
				conf = parts[0]
			}
		}
		if want := "./nats/" + name + ".conf"; conf != want {
			t.Errorf("compose.yaml: %s: --config %s is mounted from %q, want %s", name, cmd[ci+1], conf, want)
		}
		if !strings.Contains(strings.Join(strs(svc, "healthcheck", "test"), " "), "/healthz") {
			t.Errorf("compose.yaml: %s: want a healthcheck on the monitoring port's /healthz", name)
		}
	}

	// toolgate, split into role groups.
	var cmds []serveArgs
	for name, svc := range services {
		if !strings.HasPrefix(str(svc, "image"), "toolgate") {
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
		s := checkServe(t, where, strs(svc, "command"), env)
		cmds = append(cmds, s)
		if s.flags["nats"] != composeNATS {
			t.Errorf("%s: --nats %q, want %s", where, s.flags["nats"], composeNATS)
		}
		if s.flags["replicas"] != "3" {
			t.Errorf("%s: --replicas %q, want 3", where, s.flags["replicas"])
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
			checkComposeTokens(t, where, svc, s)
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

// checkComposeTokens checks that --tokens names a file mounted from an
// example tokens file that parses.
func checkComposeTokens(t *testing.T, where string, svc any, s serveArgs) {
	t.Helper()
	path := s.flags["tokens"]
	if path == "" {
		t.Errorf("%s serves HTTP on %s: want --tokens", where, s.flags["http"])
		return
	}
	for _, v := range strs(svc, "volumes") {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 && parts[1] == path {
			data, err := os.ReadFile(parts[0])
			if err != nil {
				t.Errorf("%s: --tokens %s: %v", where, path, err)
				return
			}
			checkTokens(t, parts[0], data)
			return
		}
	}
	t.Errorf("%s: --tokens %s is not mounted", where, path)
}

// ---------------------------------------------------------------------------
// Kubernetes

type k8sObject struct {
	file string
	doc  map[string]any
}

func (o k8sObject) kind() string { return str(o.doc, "kind") }
func (o k8sObject) name() string { return str(o.doc, "metadata", "name") }
func (o k8sObject) String() string {
	return fmt.Sprintf("%s: %s %s", o.file, o.kind(), o.name())
}

// k8sObjects reads every manifest kustomization.yaml lists, and checks
// that it lists every manifest in k8s/.
func k8sObjects(t *testing.T) []k8sObject {
	t.Helper()
	docs, err := yamlDocs("k8s/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	kust := docs[0]
	if str(kust, "kind") != "Kustomization" || !strings.HasPrefix(str(kust, "apiVersion"), "kustomize.config.k8s.io/") {
		t.Errorf("k8s/kustomization.yaml: not a Kustomization")
	}
	resources := strs(kust, "resources")
	files, err := filepath.Glob("k8s/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if base := filepath.Base(f); base != "kustomization.yaml" && !slices.Contains(resources, base) {
			t.Errorf("k8s/kustomization.yaml does not list %s", base)
		}
	}
	var objs []k8sObject
	for _, r := range resources {
		docs, err := yamlDocs(filepath.Join("k8s", r))
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range docs {
			objs = append(objs, k8sObject{file: "k8s/" + r, doc: d})
		}
	}
	return objs
}

func find(objs []k8sObject, kind, name string) *k8sObject {
	for i := range objs {
		if objs[i].kind() == kind && objs[i].name() == name {
			return &objs[i]
		}
	}
	return nil
}

// matches reports whether labels carry every key of selector.
func matches(selector, labels map[string]any) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if str(labels[k]) != str(v) {
			return false
		}
	}
	return true
}

func TestK8sObjects(t *testing.T) {
	objs := k8sObjects(t)
	if len(objs) == 0 {
		t.Fatal("no Kubernetes objects")
	}
	seen := map[string]bool{}
	for _, o := range objs {
		if str(o.doc, "apiVersion") == "" || o.kind() == "" || o.name() == "" {
			t.Errorf("%s: an object without apiVersion, kind or metadata.name", o.file)
			continue
		}
		key := o.kind() + "/" + o.name()
		if seen[key] {
			t.Errorf("%s: %s twice", o.file, key)
		}
		seen[key] = true
		if o.kind() != "Namespace" && str(o.doc, "metadata", "namespace") != "toolgate" {
			t.Errorf("%s: want metadata.namespace toolgate (so that kubectl apply -f works too)", o)
		}
	}
	if find(objs, "Namespace", "toolgate") == nil {
		t.Error("no Namespace toolgate")
	}
}

// workload is a Deployment's or StatefulSet's pod template, checked for
// what every pod here must have.
func checkWorkload(t *testing.T, objs []k8sObject, o k8sObject) {
	t.Helper()
	tmpl := mapping(o.doc, "spec", "template")
	if !matches(mapping(o.doc, "spec", "selector", "matchLabels"), mapping(tmpl, "metadata", "labels")) {
		t.Errorf("%s: spec.selector does not select its own pods", o)
	}
	pod := mapping(tmpl, "spec")
	if get(pod, "securityContext", "runAsNonRoot") != true {
		t.Errorf("%s: want securityContext.runAsNonRoot: true", o)
	}
	if uid, _ := get(pod, "securityContext", "runAsUser").(int); uid == 0 {
		t.Errorf("%s: want a non-zero securityContext.runAsUser", o)
	}
	if get(pod, "enableServiceLinks") != false {
		t.Errorf("%s: want enableServiceLinks: false (service links put *_PORT variables in the environment)", o)
	}
	vols := map[string]any{}
	for _, v := range list(pod, "volumes") {
		vols[str(v, "name")] = v
		if cm := str(v, "configMap", "name"); cm != "" && find(objs, "ConfigMap", cm) == nil {
			t.Errorf("%s: volume %s: no ConfigMap %s", o, str(v, "name"), cm)
		}
		if s := str(v, "secret", "secretName"); s != "" && find(objs, "Secret", s) == nil {
			t.Errorf("%s: volume %s: no Secret %s", o, str(v, "name"), s)
		}
	}
	for _, c := range list(o.doc, "spec", "volumeClaimTemplates") {
		vols[str(c, "metadata", "name")] = c
	}
	containers := list(pod, "containers")
	if len(containers) == 0 {
		t.Errorf("%s: no containers", o)
	}
	for _, c := range containers {
		where := fmt.Sprintf("%s container %s", o, str(c, "name"))
		if str(c, "image") == "" {
			t.Errorf("%s: no image", where)
		}
		for _, kind := range []string{"requests", "limits"} {
			for _, res := range []string{"cpu", "memory"} {
				if str(c, "resources", kind, res) == "" {
					t.Errorf("%s: no resources.%s.%s", where, kind, res)
				}
			}
		}
		if get(c, "securityContext", "readOnlyRootFilesystem") != true {
			t.Errorf("%s: want securityContext.readOnlyRootFilesystem: true", where)
		}
		if get(c, "securityContext", "allowPrivilegeEscalation") != false {
			t.Errorf("%s: want securityContext.allowPrivilegeEscalation: false", where)
		}
		if !slices.Contains(strs(c, "securityContext", "capabilities", "drop"), "ALL") {
			t.Errorf("%s: want securityContext.capabilities.drop: [ALL]", where)
		}
		for _, m := range list(c, "volumeMounts") {
			if vols[str(m, "name")] == nil {
				t.Errorf("%s: mounts volume %s, which the pod does not have", where, str(m, "name"))
			}
		}
		for _, probe := range []string{"startupProbe", "livenessProbe", "readinessProbe"} {
			if p := mapping(c, probe); p != nil && !containerHasPort(c, get(p, "httpGet", "port")) {
				t.Errorf("%s: %s asks port %v, which the container does not open", where, probe, get(p, "httpGet", "port"))
			}
		}
	}
}

func containerHasPort(c any, port any) bool {
	for _, p := range list(c, "ports") {
		if str(p, "name") == str(port) || str(p, "containerPort") == str(port) {
			return true
		}
	}
	return false
}

// portNumber resolves a probe's or Service's port (a name or a number)
// against a container's ports.
func portNumber(c any, port any) string {
	for _, p := range list(c, "ports") {
		if str(p, "name") == str(port) || str(p, "containerPort") == str(port) {
			return str(p, "containerPort")
		}
	}
	return ""
}

func TestK8sWorkloads(t *testing.T) {
	objs := k8sObjects(t)
	n := 0
	for _, o := range objs {
		if o.kind() == "Deployment" || o.kind() == "StatefulSet" {
			n++
			checkWorkload(t, objs, o)
		}
	}
	if n == 0 {
		t.Fatal("no Deployments or StatefulSets")
	}
	// Every Service selects pods that open the port it sends to.
	for _, svc := range objs {
		if svc.kind() != "Service" {
			continue
		}
		found := false
		for _, o := range objs {
			if (o.kind() != "Deployment" && o.kind() != "StatefulSet") || !matches(mapping(svc.doc, "spec", "selector"), mapping(o.doc, "spec", "template", "metadata", "labels")) {
				continue
			}
			found = true
			for _, p := range list(svc.doc, "spec", "ports") {
				target := get(p, "targetPort")
				if target == nil {
					target = get(p, "port")
				}
				if !slices.ContainsFunc(list(o.doc, "spec", "template", "spec", "containers"), func(c any) bool { return containerHasPort(c, target) }) {
					t.Errorf("%s: port %v: %s opens no such port", svc, target, o)
				}
			}
		}
		if !found {
			t.Errorf("%s selects no pods", svc)
		}
	}
}

func TestK8sNATS(t *testing.T) {
	objs := k8sObjects(t)
	var sts *k8sObject
	for i := range objs {
		if objs[i].kind() == "StatefulSet" && slices.ContainsFunc(list(objs[i].doc, "spec", "template", "spec", "containers"), func(c any) bool {
			return strings.HasPrefix(str(c, "image"), "nats:")
		}) {
			sts = &objs[i]
		}
	}
	if sts == nil {
		t.Fatal("no NATS StatefulSet")
	}
	replicas, _ := get(sts.doc, "spec", "replicas").(int)
	if replicas != 3 {
		t.Errorf("%s: %d replicas, want 3", sts, replicas)
	}
	svc := find(objs, "Service", str(sts.doc, "spec", "serviceName"))
	if svc == nil || str(svc.doc, "spec", "clusterIP") != "None" {
		t.Errorf("%s: serviceName %q is not a headless Service", sts, str(sts.doc, "spec", "serviceName"))
	}
	labels := mapping(sts.doc, "spec", "template", "metadata", "labels")

	// The PodDisruptionBudget keeps a quorum.
	pdb := false
	for _, o := range objs {
		if o.kind() == "PodDisruptionBudget" && matches(mapping(o.doc, "spec", "selector", "matchLabels"), labels) {
			pdb = true
			if min, _ := get(o.doc, "spec", "minAvailable").(int); min <= replicas/2 {
				t.Errorf("%s: minAvailable %d does not keep a quorum of %d", o, min, replicas)
			}
		}
	}
	if !pdb {
		t.Errorf("no PodDisruptionBudget for %s", sts)
	}

	// The container: nats:2.12 with the ConfigMap's configuration, and
	// probes on the monitoring port's /healthz.
	c := list(sts.doc, "spec", "template", "spec", "containers")[0]
	if img := str(c, "image"); !strings.HasPrefix(img, "nats:2.12") {
		t.Errorf("%s: image %s, want nats:2.12", sts, img)
	}
	for _, probe := range []string{"startupProbe", "livenessProbe", "readinessProbe"} {
		if p := str(c, probe, "httpGet", "path"); !strings.HasPrefix(p, "/healthz") {
			t.Errorf("%s: %s on %q, want /healthz", sts, probe, p)
		}
	}
	args := strs(c, "args")
	ci := slices.Index(args, "--config")
	if ci < 0 || ci+1 >= len(args) {
		t.Fatalf("%s: args %q give no --config", sts, args)
	}
	confPath := args[ci+1]
	var cm *k8sObject
	var key string
	for _, m := range list(c, "volumeMounts") {
		if dir := str(m, "mountPath"); strings.HasPrefix(confPath, dir+"/") {
			for _, v := range list(sts.doc, "spec", "template", "spec", "volumes") {
				if str(v, "name") == str(m, "name") {
					cm = find(objs, "ConfigMap", str(v, "configMap", "name"))
					key = strings.TrimPrefix(confPath, dir+"/")
				}
			}
		}
	}
	if cm == nil {
		t.Fatalf("%s: --config %s is not mounted from a ConfigMap", sts, confPath)
	}
	conf := str(cm.doc, "data", key)
	if conf == "" {
		t.Fatalf("%s: no key %s", cm, key)
	}
	// The configuration reads the pod's name from its environment.
	for _, e := range list(c, "env") {
		if str(e, "valueFrom", "fieldRef", "fieldPath") == "metadata.name" {
			t.Setenv(str(e, "name"), str(sts.doc, "metadata", "name")+"-0")
		}
	}
	path := filepath.Join(t.TempDir(), key)
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	opts := natsConf(t, cm.String(), path, replicas)
	if want := str(sts.doc, "metadata", "name") + "-0"; opts.ServerName != want {
		t.Errorf("%s: server_name is %q in pod %s: want the pod's name", cm, opts.ServerName, want)
	}
	for i, r := range opts.Routes {
		if want := fmt.Sprintf("%s-%d.%s", str(sts.doc, "metadata", "name"), i, svc.name()); r.Hostname() != want {
			t.Errorf("%s: route %d to %s, want %s", cm, i, r.Host, want)
		}
	}
	for _, m := range list(c, "volumeMounts") {
		if str(m, "mountPath") == opts.StoreDir || strings.HasPrefix(opts.StoreDir, str(m, "mountPath")+"/") {
			return
		}
	}
	t.Errorf("%s: store_dir %s is on no volume", cm, opts.StoreDir)
}

func TestK8sToolgate(t *testing.T) {
	objs := k8sObjects(t)
	natsHosts := map[string]bool{}
	for _, o := range objs {
		if o.kind() == "StatefulSet" {
			n, _ := get(o.doc, "spec", "replicas").(int)
			for i := range n {
				natsHosts[fmt.Sprintf("%s-%d.%s:4222", o.name(), i, str(o.doc, "spec", "serviceName"))] = true
			}
		}
	}
	var cmds []serveArgs
	for _, o := range objs {
		if o.kind() != "Deployment" {
			continue
		}
		pod := mapping(o.doc, "spec", "template", "spec")
		for _, c := range list(pod, "containers") {
			if !strings.HasPrefix(str(c, "image"), "toolgate") {
				continue
			}
			where := o.String()
			env := map[string]string{}
			for _, e := range list(c, "env") {
				if strings.HasPrefix(str(e, "name"), "TOOLGATE_") {
					env[str(e, "name")] = str(e, "value")
				}
			}
			s := checkServe(t, where, strs(c, "args"), env)
			cmds = append(cmds, s)
			if s.flags["replicas"] != "3" {
				t.Errorf("%s: --replicas %q, want 3", where, s.flags["replicas"])
			}
			urls := strings.Split(s.flags["nats"], ",")
			for _, u := range urls {
				pu, err := url.Parse(u)
				if err != nil || pu.Scheme != "nats" || !natsHosts[pu.Host] {
					t.Errorf("%s: --nats %s is not a server of the NATS StatefulSet", where, u)
				}
			}
			if len(urls) != len(natsHosts) {
				t.Errorf("%s: --nats names %d servers, the StatefulSet has %d", where, len(urls), len(natsHosts))
			}
			if s.runs("executor") && !s.runs("all") && s.flags["tools"] != "http" {
				t.Errorf("%s runs the executor role: want --tools http, got %q", where, s.flags["tools"])
			}
			if s.runs("timer") && !s.runs("all") {
				if n, _ := get(o.doc, "spec", "replicas").(int); n < 2 {
					t.Errorf("%s runs the timer: want 2 replicas or more", where)
				}
			}
			if !s.runs("http") {
				continue
			}
			// The http role: probes on its port, tokens from the Secret.
			_, port, err := net.SplitHostPort(s.flags["http"])
			if err != nil {
				t.Errorf("%s: --http %q: %v", where, s.flags["http"], err)
			}
			for probe, path := range map[string]string{"readinessProbe": "/readyz", "livenessProbe": "/healthz"} {
				if got := str(c, probe, "httpGet", "path"); got != path {
					t.Errorf("%s: %s on %q, want %s", where, probe, got, path)
				}
				if got := portNumber(c, get(c, probe, "httpGet", "port")); got != port {
					t.Errorf("%s: %s asks port %q, --http listens on %s", where, probe, got, port)
				}
			}
			checkK8sTokens(t, objs, where, pod, c, s)
		}
	}
	if len(cmds) == 0 {
		t.Fatal("no toolgate Deployments")
	}
	checkRolesCovered(t, "k8s", cmds)

	// The Service "toolgate" reaches the http role.
	svc := find(objs, "Service", "toolgate")
	if svc == nil {
		t.Fatal("no Service toolgate")
	}
	for _, o := range objs {
		if o.kind() == "Deployment" && matches(mapping(svc.doc, "spec", "selector"), mapping(o.doc, "spec", "template", "metadata", "labels")) {
			for _, s := range cmds {
				if s.where == o.String() && !s.runs("http") {
					t.Errorf("%s selects %s, which does not run the http role", svc, o)
				}
			}
		}
	}
}

// checkK8sTokens checks that --tokens is a key of a mounted Secret, and
// that the Secret's example tokens parse.
func checkK8sTokens(t *testing.T, objs []k8sObject, where string, pod, c any, s serveArgs) {
	t.Helper()
	path := s.flags["tokens"]
	if path == "" {
		t.Errorf("%s serves HTTP on %s: want --tokens", where, s.flags["http"])
		return
	}
	for _, m := range list(c, "volumeMounts") {
		dir := str(m, "mountPath")
		key, ok := strings.CutPrefix(path, dir+"/")
		if !ok {
			continue
		}
		for _, v := range list(pod, "volumes") {
			if str(v, "name") != str(m, "name") {
				continue
			}
			secret := find(objs, "Secret", str(v, "secret", "secretName"))
			if secret == nil {
				t.Errorf("%s: --tokens %s is not mounted from a Secret", where, path)
				return
			}
			data := str(secret.doc, "stringData", key)
			if data == "" {
				t.Errorf("%s: no stringData key %s", secret, key)
				return
			}
			checkTokens(t, secret.String(), []byte(data))
			return
		}
	}
	t.Errorf("%s: --tokens %s is not mounted", where, path)
}

// Package deploy_test checks the deployment files in deploy/: the image,
// the compose file, the NATS configurations and the Kubernetes manifests.
// Nothing here runs a container; the files are parsed, cross-checked, and
// every toolgate command line in them is handed to a toolgate binary built
// from this tree, which must accept it.
package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"go.yaml.in/yaml/v3"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/httpapi"
)

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
	// Built without -race, as cmd/toolgate's tests build the processes
	// they kill: its packages come from the build cache that build fills,
	// and the processes, which these tests only start and talk to, run at
	// full speed (the race detector watches the same code in its
	// packages' own tests; under it, this package's took a minute).
	build := exec.Command("go", "build", "-ldflags", "-X "+symbol+"="+testVersion, "-o", bin, "../cmd/toolgate")
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

// parseServe checks a toolgate command line's flags, environment and
// roles against the binary: every flag and TOOLGATE_* variable must be one
// serve has, every role one it knows.
func parseServe(t *testing.T, where string, args []string, env map[string]string) serveArgs {
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
	return s
}

// withFlags returns a copy of a command line whose flag values are
// replaced by f(name, value).
func withFlags(args []string, f func(name, value string) string) []string {
	out := slices.Clone(args)
	for i := 1; i < len(out); i++ {
		if !strings.HasPrefix(out[i], "-") {
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(out[i], "-"), "=")
		if hasValue {
			out[i] = "--" + name + "=" + f(name, value)
		} else if i+1 < len(out) {
			i++
			out[i] = f(name, out[i])
		}
	}
	return out
}

// checkServe checks a toolgate command line against the binary (see
// parseServe), and that serve accepts its values. With --nats, it runs the
// command against a port nobody listens on: reaching "nats: connect"
// proves flags, environment and the config's validation all passed.
// Without, it runs it with -h appended, which parses the flags and stops.
// paths, if not nil, maps the paths the command names (in a container) to
// where this test laid their files out.
func checkServe(t *testing.T, where string, args []string, env map[string]string, paths func(string) string) serveArgs {
	t.Helper()
	s := parseServe(t, where, args, env)
	if t.Failed() {
		return s
	}
	_, cluster := s.flags["nats"]
	run := withFlags(args, func(name, value string) string {
		switch {
		case name == "nats":
			return "nats://127.0.0.1:" + strconv.Itoa(bustest.FreePort(t))
		case paths != nil && strings.HasPrefix(value, "/"):
			return paths(value)
		}
		return value
	})
	if !cluster {
		run = append(run, "-h")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, toolgate(t).path, run...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	for k, v := range env {
		if paths != nil && strings.HasPrefix(v, "/") {
			v = paths(v)
		}
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

// checkRolesCovered checks that the commands, together, run every role.
func checkRolesCovered(t *testing.T, where string, cmds []serveArgs) {
	t.Helper()
	for _, role := range toolgate(t).roles {
		if !slices.ContainsFunc(cmds, func(s serveArgs) bool { return s.runs(role) }) {
			t.Errorf("%s: no toolgate runs the %s role", where, role)
		}
	}
}

// checkTokens checks a tokens file: it parses, and configures at least one
// token.
func checkTokens(t *testing.T, where string, data []byte) {
	t.Helper()
	tokens, err := httpapi.ParseTokens(data)
	if err != nil {
		t.Errorf("%s: %v", where, err)
		return
	}
	if tokens.Open() {
		t.Errorf("%s: no tokens: the HTTP API would refuse to start on 0.0.0.0", where)
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
	s := checkServe(t, "Dockerfile CMD", cmd, toolgateEnv, nil)
	want := map[string]string{"data": "/data", "listen": "0.0.0.0:4222", "http": "0.0.0.0:8080"}
	for k, v := range want {
		if s.flags[k] != v {
			t.Errorf("Dockerfile CMD: --%s %q, want %q", k, s.flags[k], v)
		}
	}
	// The CLI in the container finds the admin credential serve made.
	if toolgateEnv["TOOLGATE_DATA"] != s.flags["data"] {
		t.Errorf("Dockerfile: ENV TOOLGATE_DATA=%q, want --data's %q (so that `docker exec toolgate toolgate pending` finds the admin credential)", toolgateEnv["TOOLGATE_DATA"], s.flags["data"])
	}
	// Tokens: named, never given. The HTTP API needs some on 0.0.0.0; the
	// image points at a file the operator mounts.
	if toolgateEnv["TOOLGATE_TOKENS"] == "" && s.flags["tokens"] == "" {
		t.Error("Dockerfile: the HTTP API listens on 0.0.0.0 but neither CMD nor ENV names a tokens file: toolgate would refuse to start")
	}
	for _, secret := range []string{"TOOLGATE_TOKENS_DATA", "TOOLGATE_NATS_TOKEN", "TOOLGATE_NATS_PASSWORD"} {
		if _, ok := toolgateEnv[secret]; ok {
			t.Errorf("Dockerfile: ENV %s: the image ships no secret", secret)
		}
	}
	if s.flags["tokens-data"] != "" {
		t.Error("Dockerfile: CMD gives --tokens-data: the image ships no secret")
	}
	data, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	if regexp.MustCompile(`(?i)example[-_ ]?token|tokens\.example`).Match(data) {
		t.Error("Dockerfile mentions example tokens: the image ships none")
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

// envMu keeps the environment processConfig sets to its own parse.
var envMu sync.Mutex

// processConfig parses a NATS configuration with env in the environment,
// which the configuration's $VARIABLES read.
func processConfig(path string, env map[string]string) (*natsserver.Options, error) {
	envMu.Lock()
	defer envMu.Unlock()
	for k, v := range env {
		old, had := os.LookupEnv(k)
		os.Setenv(k, v)
		defer func() {
			if had {
				os.Setenv(k, old)
			} else {
				os.Unsetenv(k)
			}
		}()
	}
	return natsserver.ProcessConfigFile(path)
}

// natsConf parses a NATS configuration with nats-server's own parser, and
// checks what every server of a toolgate cluster must have: JetStream, a
// cluster, monitoring, and authentication by toolgate's operator alone.
// env is the environment the configuration reads.
func natsConf(t *testing.T, where, path string, env map[string]string, replicas int) *natsserver.Options {
	t.Helper()
	opts, err := processConfig(path, env)
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
	// Authentication: toolgate's operator and nothing else.
	if len(opts.TrustedOperators) != 1 || opts.TrustedOperators[0].Name != "toolgate" {
		t.Errorf("%s: want toolgate's operator as the only trusted one (`toolgate creds nats-config`), got %d", where, len(opts.TrustedOperators))
	}
	if opts.SystemAccount == "" || opts.AccountResolver == nil {
		t.Errorf("%s: want a system account and an account resolver (`toolgate creds nats-config`)", where)
	}
	if len(opts.Users) > 0 || len(opts.Nkeys) > 0 || opts.Username != "" || opts.Authorization != "" || opts.NoAuthUser != "" {
		t.Errorf("%s: users, a token or no_auth_user besides the operator: every client must hold a credential toolgate issued", where)
	}
	return opts
}

// TestNATSConfs parses each compose NATS server's configuration as the
// server sees it: nats-N.conf at /etc/nats/nats.conf and, included from
// it, the nats-auth.conf that compose's auth-init service generated.
func TestNATSConfs(t *testing.T) {
	paths, err := filepath.Glob("nats/*.conf")
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 3 {
		t.Fatalf("nats/: %d configurations, want 3", len(paths))
	}
	c := loadCompose(t)
	vol := composeInit(t, c)
	var first string
	for _, path := range paths {
		name := strings.TrimSuffix(filepath.Base(path), ".conf")
		svc := c.services[name]
		if svc == nil {
			t.Errorf("compose.yaml: no service %s for %s", name, path)
			continue
		}
		conf, fs := c.natsConfig(t, name, vol)
		if conf == "" {
			continue
		}
		if got := fs.source(conf); got != filepath.Clean(path) {
			t.Errorf("compose.yaml: %s reads %s from %s, want %s", name, conf, got, path)
		}
		opts := natsConf(t, path, fs.path(conf), nil, 3)
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

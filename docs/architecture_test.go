// Package docs holds toolgate's design documents, and the test that keeps
// the code to docs/architecture.md's import rules.
package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const module = "github.com/toolgate/toolgate"

// mayImport is docs/architecture.md's table: the packages of toolgate's
// each package may import. A package missing here fails the test, so a new
// one is placed in the design before it lands.
var mayImport = map[string][]string{
	"machine":      {},
	"policy":       {"machine"},
	"wire":         {"machine"},
	"consumer":     {"wire"},
	"bus":          {"machine", "policy", "wire", "consumer"},
	"bus/embedded": {},
	"bus/bustest":  {"bus", "bus/embedded", "wire"},
	"metrics":      {"machine", "policy", "wire", "consumer", "bus"},
	"analytics":    {"machine", "policy", "wire", "consumer", "bus"},
	"gate":         {"machine", "policy", "wire", "bus", "metrics"},
	"worker":       {"machine", "policy", "wire", "consumer", "bus", "metrics"},
	"natsapi":      {"machine", "wire", "gate"},
	"auth":         {"wire"},
	"api":          {"machine", "wire", "gate", "client", "claudecode", "metrics", "analytics"},
	"client":       {"machine", "wire", "consumer"},
	"claudecode":   {"machine", "policy", "client"},
	"mcpgateway":   {"machine", "wire", "client"},
	"server":       {"policy", "wire", "consumer", "bus", "bus/embedded", "auth", "metrics", "analytics", "gate", "worker", "natsapi", "api", "client"},
	"toolgatetest": {"gate", "client", "server", "bus/bustest"},
	"docs":         {},
	"deploy":       {},
	// The binary wires everything together.
	"cmd/toolgate":   nil,
	"examples/swarm": {"machine", "wire", "client"},
	// Tests only: the Python examples run against a real toolgate; their
	// own code is Python and reads only the HTTP API and the events.
	"examples/python": {},
}

// goList runs go list in the module and returns its lines.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = ".."
	out, err := cmd.Output()
	require.NoError(t, err, "go list %v", args)
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

func TestArchitecture_ImportRules(t *testing.T) {
	t.Parallel()
	for _, line := range goList(t, "-f", "{{.ImportPath}} {{join .Imports \",\"}}", "./...") {
		path, imports, _ := strings.Cut(line, " ")
		pkg := strings.TrimPrefix(strings.TrimPrefix(path, module), "/")
		allowed, known := mayImport[pkg]
		if !assert.True(t, known, "package %s is not in docs/architecture.md's table (and this test's mayImport)", pkg) || allowed == nil {
			continue
		}
		for _, imp := range strings.Split(imports, ",") {
			if dep, ours := strings.CutPrefix(imp, module+"/"); ours {
				assert.True(t, slices.Contains(allowed, dep), "%s imports %s: the architecture allows it only %v", pkg, dep, allowed)
			}
		}
	}
}

// TestArchitecture_DomainHasNoTransport: machine and policy decide; they
// neither talk to NATS nor serve HTTP, not even through what they import.
func TestArchitecture_DomainHasNoTransport(t *testing.T) {
	t.Parallel()
	for _, pkg := range []string{"machine", "policy"} {
		for _, dep := range goList(t, "-deps", "./"+pkg) {
			for _, banned := range []string{"github.com/nats-io/", "net/http"} {
				assert.False(t, strings.HasPrefix(dep, banned), "%s depends on %s", pkg, dep)
			}
		}
	}
}

// TestArchitecture_ClientLinksNoServer: an agent linking the SDK links the
// contract and NATS's client, not the policy engine, YAML, a NATS server
// or toolgate's server side.
func TestArchitecture_ClientLinksNoServer(t *testing.T) {
	t.Parallel()
	banned := []string{module + "/policy", "gopkg.in/yaml", "go.yaml.in/yaml", "github.com/nats-io/nats-server",
		module + "/bus", module + "/gate", module + "/natsapi", module + "/api", module + "/worker"}
	for _, dep := range goList(t, "-deps", "./client") {
		for _, b := range banned {
			assert.False(t, strings.HasPrefix(dep, b), "client depends on %s", dep)
		}
	}
}

// TestArchitecture_OnlyGateBuildsAMachine: the application layer is the
// one writer of tool_calls, so it is the only production code that builds
// a machine.Machine. Tests may build their own.
func TestArchitecture_OnlyGateBuildsAMachine(t *testing.T) {
	t.Parallel()
	root := ".."
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != root {
			return filepath.SkipDir
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") ||
			strings.HasPrefix(rel, "gate"+string(filepath.Separator)) || strings.HasPrefix(rel, "machine"+string(filepath.Separator)) {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "New" {
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == "machine" {
					t.Errorf("%s builds a machine.Machine: only package gate may", rel)
				}
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
}

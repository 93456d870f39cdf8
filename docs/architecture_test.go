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
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const module = "github.com/toolgate/toolgate"

// mayImport reads the packages table of architecture.md (the rows
// | `package` | holds | may import (of toolgate's) |): for each package,
// the packages of toolgate's it may import. "—" allows none, and
// "everything" (the binary, which wires everything together) any, as nil.
// The page is the one table: a package missing from it fails
// TestArchitecture_ImportRules, so a new one is placed in the design
// before it lands.
func mayImport(t *testing.T) map[string][]string {
	t.Helper()
	doc, err := os.ReadFile("architecture.md")
	require.NoError(t, err)
	rules := map[string][]string{}
	inTable := false
	for n, line := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(line, "| package | holds | may import") {
			inTable = true
			continue
		}
		if !inTable || strings.HasPrefix(line, "|---") {
			continue
		}
		if !strings.HasPrefix(line, "|") {
			if len(rules) > 0 {
				break
			}
			continue
		}
		cells := strings.Split(strings.Trim(line, "| "), "|")
		pkg := strings.Trim(strings.TrimSpace(cells[0]), "`")
		allowed := strings.TrimSpace(cells[len(cells)-1])
		require.NotContains(t, rules, pkg, "architecture.md:%d: package %s has two rows", n+1, pkg)
		switch allowed {
		case "—":
			rules[pkg] = []string{}
		case "everything":
			rules[pkg] = nil
		default:
			for _, dep := range strings.Split(allowed, ",") {
				dep = strings.TrimSpace(dep)
				require.Regexp(t, `^[a-z]+(/[a-z]+){0,2}$`, dep, "architecture.md:%d: %s may import %q: want package paths separated by commas, — or everything", n+1, pkg, dep)
				rules[pkg] = append(rules[pkg], dep)
			}
		}
	}
	require.NotEmpty(t, rules, "architecture.md has no table | package | holds | may import |")
	return rules
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
	rules := mayImport(t)
	packages := map[string]bool{}
	for _, line := range goList(t, "-f", "{{.ImportPath}} {{join .Imports \",\"}}", "./...") {
		path, imports, _ := strings.Cut(line, " ")
		pkg := strings.TrimPrefix(strings.TrimPrefix(path, module), "/")
		packages[pkg] = true
		allowed, known := rules[pkg]
		if !assert.True(t, known, "package %s is not in docs/architecture.md's packages table: add its row", pkg) || allowed == nil {
			continue
		}
		for _, imp := range strings.Split(imports, ",") {
			if dep, ours := strings.CutPrefix(imp, module+"/"); ours {
				assert.True(t, slices.Contains(allowed, dep), "%s imports %s: docs/architecture.md allows it only %v", pkg, dep, allowed)
			}
		}
	}
	for pkg, allowed := range rules {
		assert.True(t, packages[pkg], "docs/architecture.md's packages table has a row for %s, which is no package", pkg)
		for _, dep := range allowed {
			assert.True(t, packages[dep], "docs/architecture.md: %s may import %s, which is no package", pkg, dep)
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
	banned := []string{module + "/internal/", "gopkg.in/yaml", "go.yaml.in/yaml", "github.com/nats-io/nats-server"}
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
			strings.HasPrefix(rel, filepath.Join("internal", "gate")+string(filepath.Separator)) || strings.HasPrefix(rel, "machine"+string(filepath.Separator)) {
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

// TestArchitecture_PackageCommentsNameFilesThatExist holds each package
// comment to the code: a file it names (a word ending in .go, .js, .json,
// .md or .yaml, taken from its own folder, or from the module's root when
// it has a slash) must exist (nats.go, the client library, is no file of
// toolgate's), so a comment that walks its package's files
// cannot be left describing an older layout.
func TestArchitecture_PackageCommentsNameFilesThatExist(t *testing.T) {
	named := regexp.MustCompile(`[\w./-]*\w\.(go|js|json|md|yaml)\b`)
	dirs := goList(t, "-f", "{{.Dir}}", "./...")
	checked := 0
	for _, dir := range dirs {
		pkgs, err := parser.ParseDir(token.NewFileSet(), dir, func(fi os.FileInfo) bool {
			return !strings.HasSuffix(fi.Name(), "_test.go")
		}, parser.ParseComments|parser.PackageClauseOnly)
		require.NoError(t, err, dir)
		for _, pkg := range pkgs {
			for path, file := range pkg.Files {
				if file.Doc == nil {
					continue
				}
				checked++
				for _, name := range named.FindAllString(file.Doc.Text(), -1) {
					name = strings.TrimPrefix(name, "./")
					if name == "nats.go" {
						continue
					}
					at := filepath.Join(dir, name)
					if strings.Contains(name, "/") {
						if _, err := os.Stat(at); err != nil {
							at = filepath.Join("..", name)
						}
					}
					_, err := os.Stat(at)
					assert.NoError(t, err, "%s: the package comment names %s, which does not exist", path, name)
				}
			}
		}
	}
	require.NotZero(t, checked, "no package comment read")
}

// TestArchitecture_NATSLivesInBus: NATS lives in bus (and internal/bus/...), internal/consumer,
// internal/natsapi and internal/server; the domain, the application
// layer, the workers, the metrics, the analytics and the HTTP API hold
// bus's types (or what is handed to them), so
// no non-test file of theirs imports nats.go or its jetstream package.
func TestArchitecture_NATSLivesInBus(t *testing.T) {
	t.Parallel()
	for _, dir := range natsFree {
		files, err := filepath.Glob(filepath.Join("..", dir, "*.go"))
		require.NoError(t, err)
		require.NotEmpty(t, files, "%s has no Go files", dir)
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
			require.NoError(t, err)
			for _, imp := range f.Imports {
				p := strings.Trim(imp.Path.Value, `"`)
				assert.False(t, p == "github.com/nats-io/nats.go" || strings.HasPrefix(p, "github.com/nats-io/nats.go/"),
					"%s imports %s: NATS lives in bus, internal/bus/..., internal/consumer, internal/natsapi and internal/server", strings.TrimPrefix(path, "../"), p)
			}
		}
	}
}

// natsFree are the packages that TestArchitecture_NATSLivesInBus holds
// to importing no nats.go.
var natsFree = []string{"internal/gate", "internal/worker", "metrics", "internal/analytics", "policy", "machine", "internal/httpapi"}

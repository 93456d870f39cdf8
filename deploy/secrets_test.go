package deploy_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/toolgate/toolgate/internal/httpapi"
)

var (
	// A NATS seed: S, the key's type, and base32 (58 characters in all).
	seedRE = regexp.MustCompile(`\bS[A-Z2-7]{57}\b`)
	// A JWT: a JSON header and claims, base64url, and a signature.
	jwtRE = regexp.MustCompile(`eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+`)
	// What a random token or key printed in hex looks like.
	hexRE = regexp.MustCompile(`\b[0-9a-fA-F]{32,}\b`)
)

// secretFlags are the flags and variables that carry a secret's value
// rather than a file's name.
var secretFlags = []string{"tokens-data", "nats-token", "nats-password"}

// TestNoShippedSecrets checks that no file here holds a secret anyone
// could use: a NATS seed or JWT (a credential, the trust chain's keys or an
// operator), a private key, a bearer token, or a secret given inline to
// toolgate.
func TestNoShippedSecrets(t *testing.T) {
	n := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		n++
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range seedRE.FindAllString(string(data), -1) {
			if _, err := nkeys.FromSeed([]byte(m)); err == nil {
				t.Errorf("%s: a NATS seed (%.8s…)", path, m)
			}
		}
		if m := jwtRE.FindString(string(data)); m != "" {
			t.Errorf("%s: a JWT (%.16s…)", path, m)
		}
		if m := hexRE.FindString(string(data)); m != "" {
			t.Errorf("%s: %.8s…: a random value in hex, like a token or key", path, m)
		}
		// PEM and .creds armour ("-----" joined here so that this file
		// does not match itself).
		for _, kind := range []string{"PRIVATE KEY", "NKEY SEED", "USER JWT"} {
			if strings.Contains(string(data), kind+"-----") {
				t.Errorf("%s: holds a %s", path, kind)
			}
		}
		for i, line := range strings.Split(string(data), "\n") {
			checkNoToken(t, path, i+1, line)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no files under deploy/")
	}
	if _, err := os.Stat("tokens.example"); err == nil {
		t.Error("tokens.example: no example tokens are shipped")
	}
}

// checkNoToken fails if a line, stripped of what quotes or comments it in a
// YAML, shell or Markdown file, holds an entry a tokens file would accept.
func checkNoToken(t *testing.T, path string, n int, line string) {
	t.Helper()
	for _, entry := range strings.Split(line, ";") {
		entry = strings.Trim(strings.TrimSpace(entry), "#-|>`'\" \t")
		if len(strings.Fields(entry)) != 3 {
			continue
		}
		if tokens, err := httpapi.ParseTokens([]byte(entry)); err == nil && !tokens.Open() {
			t.Errorf("%s:%d: a usable bearer token entry (%.8s…)", path, n, entry)
		}
	}
}

// TestNoInlineSecrets checks that no command line or environment here
// gives toolgate a secret's value (tokens, a NATS token or password):
// deployments name files that they make.
func TestNoInlineSecrets(t *testing.T) {
	check := func(where string, args []string, env map[string]string) {
		for _, a := range args {
			name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			for _, f := range secretFlags {
				if strings.HasPrefix(a, "-") && name == f {
					t.Errorf("%s: --%s gives a secret inline", where, f)
				}
			}
		}
		for k := range env {
			for _, f := range secretFlags {
				if k == envVar(f) {
					t.Errorf("%s: %s gives a secret inline", where, k)
				}
			}
		}
	}
	c := loadCompose(t)
	for name, svc := range c.services {
		env := map[string]string{}
		for k, v := range mapping(svc, "environment") {
			env[k] = str(v)
		}
		check("compose.yaml: service "+name, strs(svc, "command"), env)
	}
	for _, o := range k8sObjects(t) {
		for _, c := range list(o.doc, "spec", "template", "spec", "containers") {
			env := map[string]string{}
			for _, e := range list(c, "env") {
				env[str(e, "name")] = str(e, "value")
			}
			check(o.String(), strs(c, "args"), env)
		}
	}
	for _, in := range dockerfile(t) {
		if in.cmd == "ENV" {
			k, v, _ := strings.Cut(in.args, "=")
			check("Dockerfile", nil, map[string]string{k: v})
		}
		if in.cmd == "CMD" || in.cmd == "ENTRYPOINT" {
			check("Dockerfile", execForm(t, in), nil)
		}
	}
}

// envVar is the environment variable toolgate reads a flag from.
func envVar(flag string) string {
	return "TOOLGATE_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

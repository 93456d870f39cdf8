package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/internal/server"
)

// credentials is how the verb connects, as the nats CLI would: the server
// and credential its flags give (from any of the sources fill reads);
// what they do not give, from the NATS context --context names, or else
// from the one `nats context select` chose; and a credential nothing gave
// is the admin credential of a toolgate serving from --data on this
// machine, so that the README's commands work with nothing set up.
//
// A credential (--nats-creds, --nats-user, --nats-token) replaces the
// context's credential as a whole, and --nats its server.
func (c *cliCmd) credentials() (bus.ConnConfig, error) {
	cfg := c.conn
	hasCred := func() bool { return cfg.CredsFile != "" || cfg.User != "" || cfg.Token != "" }
	explicitCred, explicitURL := hasCred(), c.flagSet("nats")
	name, via := c.natsContext, fmt.Sprintf("NATS context %q", c.natsContext)
	if name == "" && !(explicitCred && explicitURL) {
		var err error
		if name, via, err = selectedContext(c.env()); err != nil {
			return cfg, err
		}
	}
	if name != "" {
		nctx, err := loadContext(name, c.env())
		if err != nil {
			return cfg, fmt.Errorf("%s: %w", via, err)
		}
		used := false
		if nctx.URL != "" && !explicitURL {
			cfg.URLs, used, explicitURL = nctx.URL, true, true
		}
		if !explicitCred {
			cfg.User, cfg.Password, cfg.Token, cfg.CredsFile = nctx.User, nctx.Password, nctx.Token, nctx.Creds
			used = used || hasCred()
		}
		// The context's TLS settings, each unless a flag gave it.
		for _, f := range []struct {
			flag        string
			dst         *string
			fromContext string
		}{{"nats-tls-ca", &cfg.TLSCA, nctx.CA}, {"nats-tls-cert", &cfg.TLSCert, nctx.Cert}, {"nats-tls-key", &cfg.TLSKey, nctx.Key}} {
			if f.fromContext != "" && !c.flagSet(f.flag) {
				*f.dst, used = f.fromContext, true
			}
		}
		if used {
			c.credsFrom = " (from the " + via + ")"
		}
	}
	if hasCred() {
		return cfg, nil
	}
	local := server.CredsPath(c.data, "admin")
	if _, err := os.Stat(local); err == nil {
		cfg.CredsFile = local
	} else if !errors.Is(err, fs.ErrNotExist) {
		return cfg, fmt.Errorf("--data: %w", err)
	}
	if !explicitURL {
		// The toolgate serving from --data says where it listens.
		url, err := server.LocalURL(c.data)
		if err != nil {
			return cfg, fmt.Errorf("--data: %w", err)
		}
		cfg.URLs = cmp.Or(url, cfg.URLs)
	}
	return cfg, nil
}

// natsContext is what toolgate reads of a context the nats CLI saved.
type natsContext struct {
	URL      string `json:"url"`
	User     string `json:"user"`
	Password string `json:"password"`
	Token    string `json:"token"`
	Creds    string `json:"creds"`
	CA       string `json:"ca"`
	Cert     string `json:"cert"`
	Key      string `json:"key"`
}

// natsConfigDir is where the nats CLI keeps its contexts:
// $XDG_CONFIG_HOME/nats, or ~/.config/nats.
func natsConfigDir(env lookupEnv) (string, error) {
	dir, err := configDir(env)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "nats"), nil
}

// selectedContext is the context `nats context select` chose, named in
// context.txt beside the contexts, and how to say where it came from; ""
// when none is.
func selectedContext(env lookupEnv) (name, via string, err error) {
	dir, err := natsConfigDir(env)
	if err != nil {
		return "", "", nil // no home: nothing selected
	}
	path := filepath.Join(dir, "context.txt")
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", "", nil
	} else if err != nil {
		return "", "", fmt.Errorf("the selected NATS context: %w", err)
	}
	name = strings.TrimSpace(string(data))
	return name, fmt.Sprintf("NATS context %q selected in %s", name, path), nil
}

// loadContext reads the context name as the nats CLI saves it
// (context/NAME.json), its credential path expanded as the nats CLI
// expands it ($VARIABLES and a leading ~).
func loadContext(name string, env lookupEnv) (natsContext, error) {
	var nc natsContext
	if name == "" || strings.Contains(name, "..") || strings.ContainsRune(name, os.PathSeparator) {
		return nc, errors.New("not a context's name")
	}
	dir, err := natsConfigDir(env)
	if err != nil {
		return nc, err
	}
	path := filepath.Join(dir, "context", name+".json")
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nc, fmt.Errorf("no such context: no %s", path)
	} else if err != nil {
		return nc, err
	}
	if err := json.Unmarshal(data, &nc); err != nil {
		return nc, fmt.Errorf("%s: %w", path, err)
	}
	if nc.Creds != "" {
		nc.Creds = expandPath(nc.Creds, env)
	}
	return nc, nil
}

// flagSet reports whether the flag was given, by any of the sources fill
// reads.
func (c *cliCmd) flagSet(name string) bool {
	set := false
	c.fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

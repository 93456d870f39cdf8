package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/server"
)

// credentials is how the verb authenticates: the connection flags when
// any is given; else the NATS context --context names; else the admin
// credential of a toolgate serving from --data on this machine, so that
// the README's commands work with nothing set up.
func (c *cliCmd) credentials() (bus.ConnConfig, error) {
	cfg := c.conn
	if cfg.CredsFile != "" || cfg.User != "" || cfg.Token != "" {
		return cfg, nil
	}
	if c.natsContext != "" {
		return c.fromContext(cfg)
	}
	local := server.CredsPath(c.data, "admin")
	if _, err := os.Stat(local); err == nil {
		cfg.CredsFile = local
	} else if !errors.Is(err, fs.ErrNotExist) {
		return cfg, fmt.Errorf("--data: %w", err)
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
}

// fromContext fills cfg from the NATS context --context names, kept where
// the nats CLI keeps them ($XDG_CONFIG_HOME/nats/context/NAME.json). Its
// server is used unless --nats says otherwise.
func (c *cliCmd) fromContext(cfg bus.ConnConfig) (bus.ConnConfig, error) {
	dir := os.Getenv("XDG_CONFIG_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return cfg, fmt.Errorf("--context %s: %w", c.natsContext, err)
		}
		dir = filepath.Join(home, ".config")
	}
	path := filepath.Join(dir, "nats", "context", c.natsContext+".json")
	data, err := os.ReadFile(path)
	if err != nil {
		return cfg, fmt.Errorf("--context %s: %w", c.natsContext, err)
	}
	var nc natsContext
	if err := json.Unmarshal(data, &nc); err != nil {
		return cfg, fmt.Errorf("--context %s: %s: %w", c.natsContext, path, err)
	}
	if nc.URL != "" && !c.flagSet("nats") {
		cfg.URLs = nc.URL
	}
	cfg.User, cfg.Password, cfg.Token, cfg.CredsFile = nc.User, nc.Password, nc.Token, nc.Creds
	return cfg, nil
}

// flagSet reports whether the flag was given, on the command line or in
// the environment.
func (c *cliCmd) flagSet(name string) bool {
	set := false
	c.fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

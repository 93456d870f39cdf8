package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Where a verb's flags come from, the first that gives one winning:
//
//  1. the command line after the verb;
//  2. the same flag before the verb (`toolgate --nats URL pending`);
//  3. TOOLGATE_<FLAG> (--nats-creds: TOOLGATE_NATS_CREDS);
//  4. for the connection only, the nats CLI's NATS_URL, NATS_CREDS and
//     NATS_CONTEXT;
//  5. toolgate's config file (--config, or
//     $XDG_CONFIG_HOME/toolgate/config.yaml if it exists);
//  6. the flag's default.
//
// A NATS context (--context, or the one `nats context select` chose) then
// gives the server and the credential that none of these gave, and the
// admin credential of a toolgate serving from --data on this machine the
// credential that nothing gave (see credentials). serve reads 1 to 3 only:
// what a person's CLI is set up to reach is not where a server runs.

// configUsage is --config's.
const configUsage = "toolgate's config file: the connection and credential settings (default $XDG_CONFIG_HOME/toolgate/config.yaml, if it exists)"

// lookupEnv reads one environment variable: os.LookupEnv, or a test's.
type lookupEnv func(string) (string, bool)

// globalFlag is a flag given before the verb.
type globalFlag struct{ name, value string }

// natsEnv are the nats CLI's variables toolgate reads, and the flags they
// stand for.
var natsEnv = []struct{ env, flag string }{
	{"NATS_URL", "nats"},
	{"NATS_CREDS", "nats-creds"},
	{"NATS_CONTEXT", "context"},
}

// configKeys are what a config file may set: the connection and the
// credential, under their flags' names. pathKeys are those that name
// files, which may start with ~ and hold $VARIABLES, and are relative to
// the config file's directory.
var (
	configKeys = []string{"nats", "nats-creds", "nats-user", "nats-password", "nats-token", "nats-tls-ca", "nats-tls-cert", "nats-tls-key", "context", "data"}
	pathKeys   = []string{"nats-creds", "nats-tls-ca", "nats-tls-cert", "nats-tls-key", "data"}
)

// flagFiller sets the flags of fs that nothing before it set.
type flagFiller struct {
	fs  *flag.FlagSet
	set map[string]bool
}

func newFlagFiller(fs *flag.FlagSet) *flagFiller {
	f := &flagFiller{fs: fs, set: map[string]bool{}}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	return f
}

// fill sets the flag name to value unless it is set or fs has no such
// flag; source names value in an error.
func (f *flagFiller) fill(name, value, source string) error {
	if f.set[name] || f.fs.Lookup(name) == nil {
		return nil
	}
	if err := f.fs.Set(name, value); err != nil {
		return fmt.Errorf("%s: %v", source, err)
	}
	f.set[name] = true
	return nil
}

// globals fills the flags given before the verb; skip is a flag of the
// verb that one of them does not stand for.
func (f *flagFiller) globals(verb string, globals []globalFlag, skip string) error {
	for _, g := range globals {
		if g.name == skip {
			continue
		}
		if f.fs.Lookup(g.name) == nil {
			return fmt.Errorf("--%s, given before the command, is not a flag of %s", g.name, verb)
		}
		if err := f.fill(g.name, g.value, "--"+g.name); err != nil {
			return err
		}
	}
	return nil
}

// env fills every flag from its TOOLGATE_<FLAG> variable.
func (f *flagFiller) env(env lookupEnv) error {
	var err error
	f.fs.VisitAll(func(fl *flag.Flag) {
		if err != nil {
			return
		}
		name := envName(fl.Name)
		if v, ok := env(name); ok {
			err = f.fill(fl.Name, v, fmt.Sprintf("%s=%q", name, v))
		}
	})
	return err
}

// fill gives every flag the command line did not set its value from the
// sources after it, in order (see the top of this file).
func (c *cliCmd) fill() error {
	f := newFlagFiller(c.fs)
	skip := ""
	if c.ownConfig {
		skip = "config" // toolgate's config file, not the verb's --config
	}
	if err := f.globals(c.verb, c.out.globals, skip); err != nil {
		return err
	}
	env := c.env()
	if err := f.env(env); err != nil {
		return err
	}
	for _, n := range natsEnv {
		if v, ok := env(n.env); ok && v != "" {
			if err := f.fill(n.flag, v, n.env); err != nil {
				return err
			}
		}
	}
	path, explicit, err := c.configPath()
	if err != nil {
		return err
	}
	values, err := loadConfig(path, env)
	if errors.Is(err, fs.ErrNotExist) && !explicit {
		return nil // no config file: nothing to read
	} else if err != nil {
		return err
	}
	for _, k := range configKeys {
		if v, ok := values[k]; ok {
			if err := f.fill(k, v, path); err != nil {
				return err
			}
		}
	}
	return nil
}

// env is the verb's environment.
func (c *cliCmd) env() lookupEnv {
	if c.out.env != nil {
		return c.out.env
	}
	return os.LookupEnv
}

// configPath is toolgate's config file: the one --config names (after the
// verb, before it, or in TOOLGATE_CONFIG), which must exist, or the
// default, which may not.
func (c *cliCmd) configPath() (path string, explicit bool, err error) {
	path = c.config
	if c.ownConfig {
		path = ""
		for _, g := range c.out.globals {
			if g.name == "config" {
				path = g.value
			}
		}
	}
	if path != "" {
		return path, true, nil
	}
	dir, err := configDir(c.env())
	if err != nil {
		return "", false, nil // no home: no default config file either
	}
	return filepath.Join(dir, "toolgate", "config.yaml"), false, nil
}

// configDir is where the user's configuration lives: $XDG_CONFIG_HOME, or
// ~/.config (the home from $HOME, or the OS's account when it is unset).
func configDir(env lookupEnv) (string, error) {
	if dir, ok := env("XDG_CONFIG_HOME"); ok && dir != "" {
		return dir, nil
	}
	home, err := homeDir(env)
	if err != nil {
		return "", err
	}
	return filepath.Join(home, ".config"), nil
}

// homeDir is the user's home directory: $HOME, or the OS account's.
func homeDir(env lookupEnv) (string, error) {
	if home, ok := env("HOME"); ok && home != "" {
		return home, nil
	}
	u, err := user.Current()
	if err != nil {
		return "", fmt.Errorf("no home directory: $HOME is unset and %w", err)
	}
	if u.HomeDir == "" {
		return "", errors.New("no home directory: $HOME is unset and the OS account has none")
	}
	return u.HomeDir, nil
}

// expandPath expands a leading ~ to the home directory and $VARIABLES, as
// the nats CLI does in a context's credential path.
func expandPath(path string, env lookupEnv) string {
	path = os.Expand(path, func(name string) string {
		v, _ := env(name)
		return v
	})
	if path == "~" || strings.HasPrefix(path, "~/") {
		if home, err := homeDir(env); err == nil {
			path = home + path[1:]
		}
	}
	return path
}

// loadConfig reads a config file: a YAML mapping of configKeys to
// strings. A key it does not know is an error naming the key and the file.
func loadConfig(path string, env lookupEnv) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	values := map[string]string{}
	if len(doc.Content) == 0 {
		return values, nil // empty
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("config file %s: line %d: want a mapping of settings (nats: URL, nats-creds: FILE, …)", path, root.Line)
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		switch {
		case !slices.Contains(configKeys, k.Value):
			return nil, fmt.Errorf("config file %s: line %d: unknown key %q (it may hold %s)", path, k.Line, k.Value, strings.Join(configKeys, ", "))
		case v.Kind != yaml.ScalarNode:
			return nil, fmt.Errorf("config file %s: line %d: %s: want a string", path, v.Line, k.Value)
		case v.Tag == "!!null":
			continue // `nats:` with nothing after it sets nothing
		}
		if _, dup := values[k.Value]; dup {
			return nil, fmt.Errorf("config file %s: line %d: %s given twice", path, k.Line, k.Value)
		}
		value := v.Value
		if slices.Contains(pathKeys, k.Value) && value != "" {
			value = expandPath(value, env)
			if !filepath.IsAbs(value) {
				value = filepath.Join(filepath.Dir(path), value)
			}
		}
		values[k.Value] = value
	}
	return values, nil
}

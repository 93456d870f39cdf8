package mcpgateway

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.yaml.in/yaml/v3"

	"github.com/toolgate/toolgate/machine"
)

// Config names the MCP servers the gateway stands in front of. Its file is
// YAML or JSON (JSON is YAML too):
//
//	servers:
//	  fs:
//	    command: [npx, -y, "@modelcontextprotocol/server-filesystem", /home/me/project]
//	    env: {LOG_LEVEL: debug}
//	  github:
//	    url: https://api.githubcopilot.com/mcp/
//	    headers: {Authorization: "Bearer ${GITHUB_TOKEN}"}
type Config struct {
	Servers map[string]Upstream `json:"servers" yaml:"servers"`
}

// Upstream is one MCP server: a command the gateway starts and speaks to
// over its stdin and stdout, or a streamable-HTTP URL.
type Upstream struct {
	// Command and its arguments; Args, when given, follow it (so that an
	// entry written for Claude Desktop, a command and its args, reads
	// as it is).
	Command Argv     `json:"command,omitempty" yaml:"command,omitempty"`
	Args    []string `json:"args,omitempty" yaml:"args,omitempty"`
	// Env is added to the gateway's own environment for the command.
	// ${NAME} in a value is the gateway's variable NAME.
	Env map[string]string `json:"env,omitempty" yaml:"env,omitempty"`
	// Dir is the command's working directory (default: the gateway's).
	Dir string `json:"dir,omitempty" yaml:"dir,omitempty"`

	// URL of a streamable-HTTP MCP server, and the headers to send it
	// (${NAME} in a value is the gateway's variable NAME).
	URL     string            `json:"url,omitempty" yaml:"url,omitempty"`
	Headers map[string]string `json:"headers,omitempty" yaml:"headers,omitempty"`

	// Transport, when set, connects to the server instead: for Go
	// programs that embed the gateway, and tests. It is called once per
	// connection.
	Transport func() mcp.Transport `json:"-" yaml:"-"`
}

// Argv is a command line: a list, or one string naming the program.
type Argv []string

// UnmarshalYAML takes a list or a string.
func (a *Argv) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		var s string
		if err := n.Decode(&s); err != nil {
			return err
		}
		*a = Argv{s}
		return nil
	}
	var list []string
	if err := n.Decode(&list); err != nil {
		return err
	}
	*a = list
	return nil
}

// serverName is what may name a server: it becomes part of tool names
// (mcp__<server>__<tool> in toolgate, <server>__<tool> toward the client),
// so it holds no "__" and neither starts nor ends with "_".
var serverName = regexp.MustCompile(`^[A-Za-z0-9-]+(_[A-Za-z0-9-]+)*$`)

// maxServerName leaves a tool name room within toolgate's 128 bytes.
const maxServerName = 32

// LoadConfig reads a config file.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	cfg, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// ParseConfig reads a config document (YAML or JSON) and checks it: a
// field it does not know, or a server that names neither or both of a
// command and a URL, is refused, naming it. Errors wrap machine.ErrInvalid.
func ParseConfig(data []byte) (*Config, error) {
	var cfg Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: %v", machine.ErrInvalid, err)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &cfg, nil
}

// Validate checks the config, naming the field at fault.
func (c *Config) Validate() error {
	if len(c.Servers) == 0 {
		return fmt.Errorf("%w: servers: name at least one MCP server", machine.ErrInvalid)
	}
	for _, name := range c.names() {
		u := c.Servers[name]
		at := "servers." + name
		switch {
		case !serverName.MatchString(name) || len(name) > maxServerName:
			return fmt.Errorf("%w: %s: a server's name is 1 to %d letters, digits, '-' or single '_' inside, got %q", machine.ErrInvalid, at, maxServerName, name)
		case u.Transport != nil:
		case len(u.Command) > 0 && u.URL != "":
			return fmt.Errorf("%w: %s: command or url, not both", machine.ErrInvalid, at)
		case len(u.Command) > 0:
			if u.Command[0] == "" {
				return fmt.Errorf("%w: %s.command: the program is empty", machine.ErrInvalid, at)
			}
			if len(u.Headers) > 0 {
				return fmt.Errorf("%w: %s.headers: only for a url", machine.ErrInvalid, at)
			}
		case u.URL != "":
			if p, err := url.Parse(u.URL); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
				return fmt.Errorf("%w: %s.url: want an http or https URL, got %q", machine.ErrInvalid, at, u.URL)
			}
			if len(u.Env) > 0 || len(u.Args) > 0 || u.Dir != "" {
				return fmt.Errorf("%w: %s: env, args and dir are for a command", machine.ErrInvalid, at)
			}
		default:
			return fmt.Errorf("%w: %s: give a command (a list: [program, args…]) or a url", machine.ErrInvalid, at)
		}
	}
	return nil
}

// names are the servers' names, sorted.
func (c *Config) names() []string {
	names := make([]string, 0, len(c.Servers))
	for n := range c.Servers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// argv is the command line to start.
func (u Upstream) argv() []string { return append(slices.Clone([]string(u.Command)), u.Args...) }

// envRef is a reference to one of the gateway's environment variables.
var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// expand replaces each ${NAME} in s with the gateway's variable NAME.
func expand(s string) string {
	return envRef.ReplaceAllStringFunc(s, func(ref string) string {
		return os.Getenv(strings.TrimSuffix(strings.TrimPrefix(ref, "${"), "}"))
	})
}

package mcpgateway

import (
	"errors"
	"fmt"
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
// field it does not know, a value of the wrong kind, or a server that
// names neither or both of a command and a URL, is refused, naming the
// field (and its line). Errors wrap machine.ErrInvalid.
func ParseConfig(data []byte) (*Config, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%w: %s", machine.ErrInvalid, yamlError(err))
	}
	if err := checkFields(&doc); err != nil {
		return nil, fmt.Errorf("%w: %v", machine.ErrInvalid, err)
	}
	var cfg Config
	if len(doc.Content) > 0 {
		if err := doc.Decode(&cfg); err != nil {
			return nil, fmt.Errorf("%w: %s", machine.ErrInvalid, yamlError(err))
		}
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &cfg, nil
}

// serverFields are the fields of a server, as the config names them.
var serverFields = []string{"command", "args", "env", "dir", "url", "headers"}

// checkFields refuses a field the config does not know, naming it and its
// line.
func checkFields(doc *yaml.Node) error {
	if len(doc.Content) == 0 {
		return nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: the config is a map with servers in it", root.Line)
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		key, val := root.Content[i], root.Content[i+1]
		if key.Value != "servers" {
			return fmt.Errorf("line %d: unknown field %q: the config has servers only", key.Line, key.Value)
		}
		if val.Kind != yaml.MappingNode {
			if val.Tag == "!!null" {
				continue
			}
			return fmt.Errorf("line %d: servers: a map of server names to servers", val.Line)
		}
		for j := 0; j+1 < len(val.Content); j += 2 {
			name, server := val.Content[j], val.Content[j+1]
			if server.Kind != yaml.MappingNode {
				if server.Tag == "!!null" {
					continue
				}
				return fmt.Errorf("line %d: servers.%s: a server is a map (%s)", server.Line, name.Value, strings.Join(serverFields, ", "))
			}
			for k := 0; k+1 < len(server.Content); k += 2 {
				f, v := server.Content[k], server.Content[k+1]
				if !slices.Contains(serverFields, f.Value) {
					return fmt.Errorf("line %d: servers.%s: unknown field %q: a server has %s", f.Line, name.Value, f.Value, strings.Join(serverFields, ", "))
				}
				if want := fieldKind(f.Value, v); want != "" {
					return fmt.Errorf("line %d: servers.%s.%s: want %s", v.Line, name.Value, f.Value, want)
				}
			}
		}
	}
	return nil
}

// fieldKind says what the server's field wants when v is not that: ""
// when it is.
func fieldKind(field string, v *yaml.Node) string {
	strs := func(nodes []*yaml.Node) bool {
		for _, n := range nodes {
			if n.Kind != yaml.ScalarNode {
				return false
			}
		}
		return true
	}
	switch field {
	case "command":
		if v.Kind == yaml.ScalarNode || v.Kind == yaml.SequenceNode && strs(v.Content) {
			return ""
		}
		return "a list (program, then its arguments) or a program's name"
	case "args":
		if v.Kind == yaml.SequenceNode && strs(v.Content) {
			return ""
		}
		return "a list of arguments"
	case "env", "headers":
		if v.Kind == yaml.MappingNode && strs(v.Content) {
			return ""
		}
		return "a map of names to values"
	default: // dir, url
		if v.Kind == yaml.ScalarNode {
			return ""
		}
		return "a string"
	}
}

// goTypes are how the YAML decoder names the config's Go types, and what
// the config calls them.
var goTypes = strings.NewReplacer(
	"map[string]mcpgateway.Upstream", "a map of server names to servers",
	"mcpgateway.Upstream", "a server",
	"mcpgateway.Config", "the config",
	"mcpgateway.Argv", "a command",
	"map[string]string", "a map of names to strings",
	"[]string", "a list of strings",
	"!!seq", "a list", "!!map", "a map", "!!str", "a string", "!!int", "a number", "!!float", "a number", "!!bool", "a boolean",
	"cannot unmarshal", "cannot read",
	"yaml: unmarshal errors:\n  ", "", "yaml: ", "",
)

// yamlError is the decoder's error in the config's words: each line of
// it says which line of the file it is about.
func yamlError(err error) string {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		return goTypes.Replace(strings.Join(te.Errors, "; "))
	}
	return goTypes.Replace(err.Error())
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

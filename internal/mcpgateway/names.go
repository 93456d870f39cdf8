package mcpgateway

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/toolgate/toolgate/machine"
)

// Separator joins a server's name and its tool's (or prompt's) name: in
// toolgate's tool names always (mcp__<server>__<tool>, as Claude Code
// names MCP tools, so that its permission rules apply unchanged), and
// toward the client when the gateway fronts several servers.
const Separator = "__"

// ToolName is the toolgate tool name of an upstream server's tool:
// mcp__<server>__<tool>. A tool name is kept as it is when toolgate can
// take it (letters, digits, '_' and '-', 128 bytes in all); one it cannot
// (MCP also allows '.', and longer names) has every other character
// replaced with '_', is cut to fit, and gets the first 8 hex digits of its
// SHA-256 appended, so that two such tools of one server do not share a
// name, and so a rule.
func ToolName(server, tool string) string {
	prefix := "mcp" + Separator + server + Separator
	if name := prefix + tool; machine.ValidToolName(name) {
		return name
	}
	var b strings.Builder
	for _, r := range tool {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	sum := sha256.Sum256([]byte(tool))
	suffix := "_" + hex.EncodeToString(sum[:4])
	safe := b.String()
	if room := 128 - len(prefix) - len(suffix); len(safe) > room {
		safe = safe[:max(room, 0)]
	}
	return prefix + safe + suffix
}

// clientName is the name a tool or prompt of server has toward the
// client: its own, or <server>__<name> when the gateway fronts several.
func (gw *Gateway) clientName(server, name string) string {
	if !gw.namespaced {
		return name
	}
	return server + Separator + name
}

// route finds the server and the upstream name of what the client calls
// name; ok is false when name names no configured server.
func (gw *Gateway) route(name string) (server, upstreamName string, ok bool) {
	if !gw.namespaced {
		return gw.servers[0], name, true
	}
	server, rest, found := strings.Cut(name, Separator)
	if !found || rest == "" {
		return "", "", false
	}
	if _, known := gw.cfg.Servers[server]; !known {
		return "", "", false
	}
	return server, rest, true
}

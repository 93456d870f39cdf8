// Command upstream is the MCP server the gateway's tests stand in front
// of: a real process speaking MCP on stdio, built with the official SDK.
// Every tool call it receives is appended, as a line of JSON, to the file
// $UPSTREAM_LOG names, before the tool does anything, so a test knows what
// reached it (and what never did).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Call is one line of the log.
type Call struct {
	Tool string          `json:"tool"`
	Args json.RawMessage `json:"args"`
	PID  int             `json:"pid"`
	// Protocol is the MCP revision the call came on.
	Protocol string `json:"protocol"`
}

var mu sync.Mutex

func record(tool string, args json.RawMessage, protocol string) {
	path := os.Getenv("UPSTREAM_LOG")
	if path == "" {
		return
	}
	mu.Lock()
	defer mu.Unlock()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	line, _ := json.Marshal(Call{Tool: tool, Args: args, PID: os.Getpid(), Protocol: protocol})
	if _, err := f.Write(append(line, '\n')); err != nil {
		log.Fatal(err)
	}
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

func main() {
	s := mcp.NewServer(&mcp.Implementation{Name: "upstream", Version: "1.0.0"}, nil)
	object := map[string]any{"type": "object"}
	str := map[string]any{"type": "string"}
	// The file tools' schemas name their path, as the reference
	// filesystem server's do.
	file := map[string]any{"type": "object", "properties": map[string]any{"path": str, "content": str}}
	tool := func(name, description string, h func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error)) {
		schema := object
		if strings.HasSuffix(name, "_file") {
			schema = file
		}
		s.AddTool(&mcp.Tool{Name: name, Description: description, InputSchema: schema}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			record(name, req.Params.Arguments, req.ProtocolVersion())
			var args map[string]any
			_ = json.Unmarshal(req.Params.Arguments, &args)
			return h(ctx, args)
		})
	}
	tool("echo", "Echo text.", func(_ context.Context, a map[string]any) (*mcp.CallToolResult, error) {
		return text(fmt.Sprintf("echo: %v", a["text"])), nil
	})
	tool("write_file", "Write a file.", func(_ context.Context, a map[string]any) (*mcp.CallToolResult, error) {
		return text(fmt.Sprintf("wrote %v", a["path"])), nil
	})
	tool("delete_file", "Delete a file.", func(_ context.Context, a map[string]any) (*mcp.CallToolResult, error) {
		return text(fmt.Sprintf("deleted %v", a["path"])), nil
	})
	tool("fail", "Always fails.", func(context.Context, map[string]any) (*mcp.CallToolResult, error) {
		res := text("disk full")
		res.IsError = true
		return res, nil
	})
	tool("hang", "Runs until cancelled (or the process is killed).", func(ctx context.Context, _ map[string]any) (*mcp.CallToolResult, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		log.Print(err)
	}
}

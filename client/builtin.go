package client

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"time"
)

// FencingTokenHeader is the header in which the built-in http tool
// sends a run's Call.FencingToken.
const FencingTokenHeader = "Toolgate-Fencing-Token"

// maxOutput bounds what a built-in tool keeps of a body or an output
// stream: an entry is not the place for megabytes.
const maxOutput = 256 << 10

// HTTPTool is the built-in "http" tool. Arguments: {"url", "method",
// "headers", "body"}; result: {"status", "headers", "body"}. Any HTTP
// status is a result; only failing to get one is an error (retried).
// Every request carries the call's ToolCallID as its Idempotency-Key,
// the same for every run of the call, so that a server that keeps the
// keys it has served answers a second run without doing it again; and
// the run's FencingToken as Toolgate-Fencing-Token, so that a server can
// refuse a run older than one it has seen.
func HTTPTool(hc *http.Client) Handler {
	if hc == nil {
		hc = &http.Client{Timeout: time.Minute}
	}
	return func(ctx context.Context, call Call) (Result, error) {
		var args struct {
			URL     string            `json:"url"`
			Method  string            `json:"method"`
			Headers map[string]string `json:"headers"`
			Body    string            `json:"body"`
		}
		if err := json.Unmarshal(call.Arguments, &args); err != nil {
			return Result{}, Permanent(fmt.Errorf("http: arguments: %w", err))
		}
		if !strings.HasPrefix(args.URL, "http://") && !strings.HasPrefix(args.URL, "https://") {
			return Result{}, Permanent(fmt.Errorf("http: url: want http:// or https://, got %q", args.URL))
		}
		req, err := http.NewRequestWithContext(ctx, strings.ToUpper(cmp.Or(args.Method, "GET")), args.URL, strings.NewReader(args.Body))
		if err != nil {
			return Result{}, Permanent(fmt.Errorf("http: %w", err))
		}
		for k, v := range args.Headers {
			req.Header.Set(k, v)
		}
		// The agent's call id lets the far side drop a repeat; the
		// fencing token, a run that is not the latest.
		req.Header.Set("Idempotency-Key", call.ToolCallID)
		req.Header.Set(FencingTokenHeader, call.FencingToken())
		resp, err := hc.Do(req)
		if err != nil {
			return Result{}, fmt.Errorf("http: %w", err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, maxOutput))
		if err != nil {
			return Result{}, fmt.Errorf("http: reading the body: %w", err)
		}
		headers := map[string]string{}
		for k := range resp.Header {
			headers[k] = resp.Header.Get(k)
		}
		out, _ := json.Marshal(map[string]any{"status": resp.StatusCode, "headers": headers, "body": string(body)})
		return Result{Output: out}, nil
	}
}

// ExecTool is the built-in "exec" tool. Arguments: {"command": [argv…],
// "timeoutMs"}; result: {"exitCode", "stdout", "stderr"}. The command runs
// without a shell, with the call's ToolCallID in TOOLGATE_TOOL_CALL_ID and
// the run's FencingToken in TOOLGATE_FENCING_TOKEN. A non-zero exit fails the call at once, with the result
// recorded: running it again could repeat what it did.
func ExecTool() Handler {
	return func(ctx context.Context, call Call) (Result, error) {
		var args struct {
			Command   []string `json:"command"`
			TimeoutMs int64    `json:"timeoutMs"`
		}
		if err := json.Unmarshal(call.Arguments, &args); err != nil {
			return Result{}, Permanent(fmt.Errorf("exec: arguments: %w", err))
		}
		if len(args.Command) == 0 || args.Command[0] == "" {
			return Result{}, Permanent(errors.New("exec: command: want [program, args…]"))
		}
		if args.TimeoutMs > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, time.Duration(args.TimeoutMs)*time.Millisecond)
			defer cancel()
		}
		var stdout, stderr cappedBuffer
		cmd := exec.CommandContext(ctx, args.Command[0], args.Command[1:]...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		cmd.Env = append(cmd.Environ(), "TOOLGATE_TOOL_CALL_ID="+call.ToolCallID, "TOOLGATE_FENCING_TOKEN="+call.FencingToken())
		err := cmd.Run()
		code := 0
		var exitErr *exec.ExitError
		switch {
		case errors.As(err, &exitErr):
			code = exitErr.ExitCode()
		case err != nil:
			return Result{}, Permanent(fmt.Errorf("exec: %w", err))
		}
		out, _ := json.Marshal(map[string]any{"exitCode": code, "stdout": stdout.String(), "stderr": stderr.String()})
		if code != 0 {
			return Result{Output: out}, Permanent(fmt.Errorf("exec: %s exited with %d", args.Command[0], code))
		}
		return Result{Output: out}, nil
	}
}

// cappedBuffer keeps the first maxOutput bytes written to it.
type cappedBuffer struct{ bytes.Buffer }

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if room := maxOutput - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

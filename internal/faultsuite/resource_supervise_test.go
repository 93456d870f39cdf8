package faultsuite

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/server"
	"github.com/toolgate/toolgate/internal/servetest"
)

// supervised is a `toolgate serve` kept running as a supervisor
// (systemd's Restart=always, a container's restart policy) keeps it: each
// time it exits, it is started again a moment later.
type supervised struct {
	name string

	mu      sync.Mutex
	runs    []*process
	exits   []string    // each run's end: when, and its exit code
	serving []time.Time // when each run said it was serving
}

// superviseServe starts `toolgate serve` with args (given --nats, it
// connects with the credential of the data directory remembered for
// those URLs, as startServe does) and starts it again whenever it exits,
// until the test ends. It returns once the first run serves.
func superviseServe(t *testing.T, name string, args ...string) *supervised {
	t.Helper()
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "--nats" {
			args = append(args, "--nats-creds", serverCreds(t, args[i+1]))
			break
		}
	}
	bin := toolgateBinary(t)
	s := &supervised{name: name}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			p := runServe(t, bin, args, func(line string) {
				if strings.Contains(line, "toolgate serving") {
					s.mu.Lock()
					s.serving = append(s.serving, time.Now())
					s.mu.Unlock()
				}
			})
			s.mu.Lock()
			s.runs = append(s.runs, p)
			s.mu.Unlock()
			select {
			case <-ctx.Done():
				p.kill()
				return
			case <-p.done:
			}
			s.mu.Lock()
			s.exits = append(s.exits, fmt.Sprintf("%s pid %d exited %d", time.Now().UTC().Format("15:04:05.000"), p.cmd.Process.Pid, p.cmd.ProcessState.ExitCode()))
			s.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() {
		stop()
		<-done
		if t.Failed() {
			t.Logf("--- %s: exits %v; warnings and errors:\n%s", name, s.Exits(), grepLevels(s.output()))
		}
	})
	waitFor(t, 60*time.Second, func() (bool, string) {
		return s.servings() > 0, grepLevels(s.output())
	}, "%s never served", name)
	return s
}

// serverCreds is toolgate's own credential for the cluster at urls.
func serverCreds(t *testing.T, urls string) string {
	t.Helper()
	return server.CredsPath(servetest.DataDir(t, urls), "toolgate")
}

// servings is how many runs have said they serve.
func (s *supervised) servings() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.serving)
}

// lastServing is when the latest run said it was serving.
func (s *supervised) lastServing() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.serving) == 0 {
		return time.Time{}
	}
	return s.serving[len(s.serving)-1]
}

// Exits says how each run that ended ended.
func (s *supervised) Exits() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.exits...)
}

// pids are the runs' process ids, in order.
func (s *supervised) pids() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []int
	for _, p := range s.runs {
		out = append(out, p.cmd.Process.Pid)
	}
	return out
}

// output is every run's log, each headed by its pid.
func (s *supervised) output() string {
	s.mu.Lock()
	runs := append([]*process(nil), s.runs...)
	s.mu.Unlock()
	var b strings.Builder
	for _, p := range runs {
		fmt.Fprintf(&b, "--- pid %d\n%s", p.cmd.Process.Pid, p.output())
	}
	return b.String()
}

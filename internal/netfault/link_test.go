package netfault_test

import (
	"bufio"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/netfault"
)

// lineServer answers each line it reads with "echo <line>", and keeps
// every line it read.
type lineServer struct {
	ln   net.Listener
	mu   sync.Mutex
	seen []string
}

func startLineServer(t *testing.T) *lineServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &lineServer{ln: ln}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					s.mu.Lock()
					s.seen = append(s.seen, sc.Text())
					s.mu.Unlock()
					if _, err := c.Write([]byte("echo " + sc.Text() + "\n")); err != nil {
						return
					}
				}
			}()
		}
	}()
	return s
}

func (s *lineServer) lines() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.seen, ",")
}

func link(t *testing.T, s *lineServer) *netfault.Link {
	t.Helper()
	l, err := netfault.Listen("test", s.ln.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// conn is a client through the link.
type conn struct {
	c net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, l *netfault.Link) *conn {
	t.Helper()
	c, err := net.Dial("tcp", l.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return &conn{c: c, r: bufio.NewReader(c)}
}

// ask sends line and returns the answer, or the error reading it within
// d.
func (c *conn) ask(line string, d time.Duration) (string, error) {
	if _, err := c.c.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	_ = c.c.SetReadDeadline(time.Now().Add(d))
	s, err := c.r.ReadString('\n')
	return strings.TrimSpace(s), err
}

func TestLink_ForwardsBothWays(t *testing.T) {
	t.Parallel()
	l := link(t, startLineServer(t))
	got, err := dial(t, l).ask("a", 5*time.Second)
	require.NoError(t, err)
	assert.Equal(t, "echo a", got)
}

func TestLink_CutClosesAndRefusesUntilHealed(t *testing.T) {
	t.Parallel()
	s := startLineServer(t)
	l := link(t, s)
	c := dial(t, l)
	_, err := c.ask("before", 5*time.Second)
	require.NoError(t, err)

	l.Cut()
	// The open connection is closed: its read ends at once, not at the
	// deadline.
	_ = c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = c.r.ReadString('\n')
	require.Error(t, err)
	var ne net.Error
	assert.False(t, errorsAs(err, &ne) && ne.Timeout(), "the cut connection timed out instead of closing: %v", err)
	// A new one is accepted and closed.
	_, err = dial(t, l).ask("during", 5*time.Second)
	require.Error(t, err)
	assert.NotContains(t, s.lines(), "during")

	l.Heal()
	got, err := dial(t, l).ask("after", 5*time.Second)
	require.NoError(t, err)
	assert.Equal(t, "echo after", got)
	assert.Equal(t, "before,after", s.lines())
}

func TestLink_DelayHoldsEachWay(t *testing.T) {
	t.Parallel()
	l := link(t, startLineServer(t))
	c := dial(t, l)
	l.Delay(150 * time.Millisecond)
	from := time.Now()
	got, err := c.ask("slow", 5*time.Second)
	require.NoError(t, err)
	assert.Equal(t, "echo slow", got)
	// 150ms to the target and 150ms back.
	assert.GreaterOrEqual(t, time.Since(from), 300*time.Millisecond)
	l.Heal()
	from = time.Now()
	_, err = c.ask("fast", 5*time.Second)
	require.NoError(t, err)
	assert.Less(t, time.Since(from), 300*time.Millisecond)
}

// Replies dropped: the request reaches the target, its answer never
// comes back, and the connection stays open.
func TestLink_DropFromTargetLosesRepliesOnly(t *testing.T) {
	t.Parallel()
	s := startLineServer(t)
	l := link(t, s)
	c := dial(t, l)
	l.Drop(netfault.FromTarget)
	_, err := c.ask("lost-reply", 300*time.Millisecond)
	var ne net.Error
	require.True(t, errorsAs(err, &ne) && ne.Timeout(), "want a read timeout, got %v", err)
	bustest.Eventually(t, 5*time.Second, 10*time.Millisecond, "the request reaches the target", func() (bool, any) {
		return s.lines() == "lost-reply", s.lines()
	})
	l.Heal()
	got, err := c.ask("healed", 5*time.Second)
	require.NoError(t, err)
	assert.Equal(t, "echo healed", got)
}

// Requests dropped: the target never hears them.
func TestLink_DropToTargetLosesRequestsOnly(t *testing.T) {
	t.Parallel()
	s := startLineServer(t)
	l := link(t, s)
	c := dial(t, l)
	l.Drop(netfault.ToTarget)
	_, err := c.ask("lost-request", 300*time.Millisecond)
	require.Error(t, err)
	l.Heal()
	got, err := c.ask("healed", 5*time.Second)
	require.NoError(t, err)
	assert.Equal(t, "echo healed", got)
	assert.Equal(t, "healed", s.lines())
}

func TestLink_FlapCutsAndHealsInTurn(t *testing.T) {
	t.Parallel()
	l := link(t, startLineServer(t))
	l.Flap(100 * time.Millisecond)
	var ok, refused int
	bustest.Eventually(t, 10*time.Second, 10*time.Millisecond, "a flapping link both answers and refuses", func() (bool, any) {
		c, err := net.Dial("tcp", l.Addr())
		if err == nil {
			cc := &conn{c: c, r: bufio.NewReader(c)}
			if _, err = cc.ask("x", time.Second); err == nil {
				ok++
			} else {
				refused++
			}
			_ = c.Close()
		}
		return ok > 0 && refused > 0, "answered " + itoa(ok) + ", refused " + itoa(refused)
	})
	l.Heal()
	got, err := dial(t, l).ask("steady", 5*time.Second)
	require.NoError(t, err)
	assert.Equal(t, "echo steady", got)
	assert.Len(t, l.Log(), 2)
}

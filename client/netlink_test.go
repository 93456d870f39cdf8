package client_test

import (
	"bufio"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// natsLink is a TCP proxy between NATS clients and their server that
// reads the NATS protocol's frames as they pass, so that a test can lose
// the messages going one way or both while the connection stays up: a
// partition, or a lossy route, as a client sees it before anything tells
// it. Only messages are lost (a client's PUB and HPUB, a server's MSG and
// HMSG); the protocol's other lines (INFO, CONNECT, PING, PONG, SUB,
// UNSUB, +OK, -ERR) go through, so neither end closes the connection.
type natsLink struct {
	URL string // nats://host:port to connect to instead of the server

	// dropUp and dropDown lose the messages from the clients, and to
	// them.
	dropUp, dropDown atomic.Bool
	// onPublish, if set, is called with the subject of each message a
	// client sends, before it is passed on or lost: a test can change
	// what is lost from that message on (its answer included).
	onPublish atomic.Pointer[func(subject string)]

	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  map[net.Conn]bool
	wg     sync.WaitGroup
}

// startLink proxies to the NATS server at url until the test ends.
func startLink(t testing.TB, url string) *natsLink {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l := &natsLink{URL: "nats://" + ln.Addr().String(), ln: ln, target: strings.TrimPrefix(url, "nats://"), conns: map[net.Conn]bool{}}
	l.wg.Go(l.accept)
	t.Cleanup(func() {
		_ = ln.Close()
		l.mu.Lock()
		for c := range l.conns {
			_ = c.Close()
		}
		l.mu.Unlock()
		l.wg.Wait()
	})
	return l
}

// partition loses every message both ways; heal lets them through again.
func (l *natsLink) partition() { l.dropUp.Store(true); l.dropDown.Store(true) }
func (l *natsLink) heal()      { l.dropUp.Store(false); l.dropDown.Store(false) }

func (l *natsLink) accept() {
	for {
		in, err := l.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", l.target)
		if err != nil {
			_ = in.Close()
			continue
		}
		l.mu.Lock()
		l.conns[in], l.conns[out] = true, true
		l.mu.Unlock()
		var pipes sync.WaitGroup
		pipes.Go(func() { l.pipe(out, in, true) })
		pipes.Go(func() { l.pipe(in, out, false) })
		l.wg.Go(func() {
			pipes.Wait()
			l.mu.Lock()
			delete(l.conns, in)
			delete(l.conns, out)
			l.mu.Unlock()
		})
	}
}

// pipe copies the frames read from src to dst, up (from a client) or
// down, losing the messages the link loses that way, until either end
// closes.
func (l *natsLink) pipe(dst, src net.Conn, up bool) {
	defer func() { _ = dst.Close(); _ = src.Close() }()
	r := bufio.NewReaderSize(src, 64<<10)
	w := bufio.NewWriterSize(dst, 64<<10)
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return
		}
		frame := append([]byte(nil), line...)
		fields := strings.Fields(string(line))
		var op string
		if len(fields) > 0 {
			op = strings.ToUpper(fields[0])
		}
		message := op == "PUB" || op == "HPUB" || op == "MSG" || op == "HMSG"
		if message {
			// The payload's size is the line's last field; it and its
			// CRLF follow.
			size, err := strconv.Atoi(fields[len(fields)-1])
			if err != nil || len(fields) < 3 {
				return
			}
			payload := make([]byte, size+2)
			if _, err := io.ReadFull(r, payload); err != nil {
				return
			}
			frame = append(frame, payload...)
			if f := l.onPublish.Load(); up && f != nil {
				(*f)(fields[1])
			}
		}
		lost := message && (up && l.dropUp.Load() || !up && l.dropDown.Load())
		if !lost {
			if _, err := w.Write(frame); err != nil {
				return
			}
		}
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return
			}
		}
	}
}

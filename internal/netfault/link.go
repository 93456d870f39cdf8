// Package netfault is a TCP proxy whose links a test breaks and heals: a
// Link listens on a port of its own and forwards every connection to one
// target, and the test cuts it (every connection closed, new ones
// refused), delays it, drops the bytes of one direction while the other
// flows, or flaps it (cut and healed in turn), then heals it. Tests route
// NATS cluster routes and clients' connections through Links to
// partition a node or a process without killing it.
package netfault

import (
	"fmt"
	"net"
	"sync"
	"time"
)

// Direction is one way bytes flow through a Link.
type Direction int

const (
	// ToTarget is from the side that dialled the Link to its target: a
	// client's requests.
	ToTarget Direction = iota
	// FromTarget is from the target back to the dialling side: the
	// replies.
	FromTarget
)

func (d Direction) String() string {
	if d == ToTarget {
		return "to target"
	}
	return "from target"
}

// Link is one proxied route to a target. Its methods may be called from
// any goroutine; each applies at once to the connections open and to
// those made after.
type Link struct {
	name   string
	target string
	ln     net.Listener

	mu    sync.Mutex
	cut   bool
	delay time.Duration
	drop  [2]bool
	conns map[*pair]struct{}
	flap  chan struct{} // closed to stop the flapping goroutine; nil if none
	log   []string      // what was done to the link, for a failing test's report

	wg sync.WaitGroup
}

// pair is one proxied connection: the dialling side and the target.
type pair struct{ client, target net.Conn }

func (p *pair) close() {
	_ = p.client.Close()
	_ = p.target.Close()
}

// Listen starts a Link called name (for its log) on a free port of
// 127.0.0.1 that forwards to target (HOST:PORT).
func Listen(name, target string) (*Link, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("netfault: link %s to %s: %w", name, target, err)
	}
	l := &Link{name: name, target: target, ln: ln, conns: map[*pair]struct{}{}}
	l.wg.Go(l.accept)
	return l, nil
}

// Name is the name the Link was given.
func (l *Link) Name() string { return l.name }

// Addr is the HOST:PORT the Link listens on: dial it instead of the
// target.
func (l *Link) Addr() string { return l.ln.Addr().String() }

// Cut closes every connection through the Link and refuses new ones
// (each is closed as soon as it is accepted) until Heal.
func (l *Link) Cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cutLocked()
	l.note("cut")
}

func (l *Link) cutLocked() {
	l.cut = true
	for p := range l.conns {
		p.close()
		delete(l.conns, p)
	}
}

// Heal undoes every fault: it stops flapping, lets connections through
// again, and ends delays and drops. Connections closed by a cut stay
// closed; their ends dial again.
func (l *Link) Heal() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopFlapLocked()
	l.cut, l.delay, l.drop = false, 0, [2]bool{}
	l.note("healed")
}

// Delay holds every chunk of bytes for d before forwarding it, in both
// directions, until Heal.
func (l *Link) Delay(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.delay = d
	l.note("delay %s", d)
}

// Drop discards every byte that flows in direction d, until Heal, while
// the other direction flows: the far end's TCP acknowledges them, so
// neither end notices but by what it does not get. A connection that
// lost bytes mid-message is likely to fail once healed, as its protocol
// finds itself mid-frame, and is dialled again by its owner.
func (l *Link) Drop(d Direction) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.drop[d] = true
	l.note("dropping %s", d)
}

// Flap cuts the Link and heals it in turn, each for every, until Heal
// or Close.
func (l *Link) Flap(every time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopFlapLocked()
	stop := make(chan struct{})
	l.flap = stop
	l.note("flapping every %s", every)
	l.wg.Go(func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			l.mu.Lock()
			if l.flap == stop {
				if l.cut {
					l.cut = false
				} else {
					l.cutLocked()
				}
			}
			l.mu.Unlock()
		}
	})
}

func (l *Link) stopFlapLocked() {
	if l.flap != nil {
		close(l.flap)
		l.flap = nil
	}
}

// Log is what was done to the Link, one line each, with the time.
func (l *Link) Log() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.log...)
}

func (l *Link) note(format string, args ...any) {
	l.log = append(l.log, time.Now().UTC().Format("15:04:05.000")+" "+l.name+": "+fmt.Sprintf(format, args...))
}

// Close stops listening, closes every connection through the Link and
// waits for its goroutines.
func (l *Link) Close() error {
	err := l.ln.Close()
	l.mu.Lock()
	l.stopFlapLocked()
	l.cutLocked()
	l.mu.Unlock()
	l.wg.Wait()
	return err
}

func (l *Link) accept() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return // closed
		}
		l.mu.Lock()
		cut := l.cut
		l.mu.Unlock()
		if cut {
			_ = c.Close()
			continue
		}
		l.wg.Go(func() { l.connect(c) })
	}
}

// connect dials the target for a connection accepted and forwards both
// ways until either end closes or the Link cuts it.
func (l *Link) connect(c net.Conn) {
	t, err := net.DialTimeout("tcp", l.target, 5*time.Second)
	if err != nil {
		_ = c.Close()
		return
	}
	p := &pair{client: c, target: t}
	l.mu.Lock()
	if l.cut {
		l.mu.Unlock()
		p.close()
		return
	}
	l.conns[p] = struct{}{}
	l.mu.Unlock()
	var both sync.WaitGroup
	both.Go(func() { l.forward(p, ToTarget, t, c) })
	both.Go(func() { l.forward(p, FromTarget, c, t) })
	both.Wait()
	l.mu.Lock()
	delete(l.conns, p)
	l.mu.Unlock()
}

// forward copies from src to dst, as the Link's faults in direction d
// allow, and closes both ends when either fails.
func (l *Link) forward(p *pair, d Direction, dst, src net.Conn) {
	defer p.close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			read := time.Now()
			l.mu.Lock()
			delay, drop := l.delay, l.drop[d]
			l.mu.Unlock()
			if wait := time.Until(read.Add(delay)); wait > 0 {
				time.Sleep(wait)
			}
			if !drop {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return // EOF, or an end closed by a cut
		}
	}
}

package natstest

import (
	"io"
	"net"
	"sync"
	"testing"
)

// A link is a TCP relay in front of one endpoint of a cluster node (its
// client port, or its route port as one other node dials it). It listens
// on a port of its own for the whole test, so that its address stays the
// same across restarts of the node behind it, and it can be cut: every
// connection through it closed at once and new ones refused.
//
// # Why cluster traffic goes through links
//
// nats-server's Shutdown is graceful: it steps down the raft leaders it
// holds, handing each group to a follower in milliseconds. A node that
// crashes (SIGKILL, power) does not, and the others find out only when
// their election timeout passes. A test of that must make the node fall
// silent before it shuts down; cutting its links first does exactly that
// (its step-down goes nowhere), in-process and without a second binary.
type link struct {
	ln net.Listener
	to func() string // where to relay to now; "" while the node is down

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
}

// newLink listens on a random loopback port and relays to whatever to
// returns, until the test ends.
func newLink(t testing.TB, to func() string) *link {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("natstest: link: %v", err)
	}
	l := &link{ln: ln, to: to, conns: map[net.Conn]struct{}{}}
	go l.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		l.setCut(true)
	})
	return l
}

func (l *link) addr() string { return l.ln.Addr().String() }

func (l *link) serve() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		go l.relay(c)
	}
}

func (l *link) relay(c net.Conn) {
	l.mu.Lock()
	cut := l.cut
	l.mu.Unlock()
	target := l.to()
	if cut || target == "" {
		_ = c.Close()
		return
	}
	up, err := net.Dial("tcp", target)
	if err != nil {
		_ = c.Close()
		return
	}
	l.mu.Lock()
	if l.cut {
		l.mu.Unlock()
		_ = c.Close()
		_ = up.Close()
		return
	}
	l.conns[c], l.conns[up] = struct{}{}, struct{}{}
	l.mu.Unlock()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	// One side is gone: the other goes too, as a broken TCP connection would.
	_ = c.Close()
	_ = up.Close()
	<-done
	l.mu.Lock()
	delete(l.conns, c)
	delete(l.conns, up)
	l.mu.Unlock()
}

// setCut cuts the link (closing every connection through it, refusing new
// ones) or mends it.
func (l *link) setCut(cut bool) {
	l.mu.Lock()
	l.cut = cut
	var open []net.Conn
	if cut {
		for c := range l.conns {
			open = append(open, c)
		}
	}
	l.mu.Unlock()
	for _, c := range open {
		// An abortive close (RST), as the kernel sends for a killed process
		// with unread data; either way the peer sees the connection end.
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
}

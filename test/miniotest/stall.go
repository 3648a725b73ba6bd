package miniotest

import (
	"io"
	"net"
	"sync"
	"testing"

	"github.com/objfuse/objfuse/fusefs/store/s3store"
)

// StallingFront is a TCP relay to a server that can be told to stall, as
// an endpoint does that accepts connections and then stops reading: from
// Stall on, no byte a client sends reaches the server and no answer
// comes back, on new and kept connections alike, until Resume.
type StallingFront struct {
	Config s3store.Config // reaches the server through the relay

	mu      sync.Mutex
	stalled bool
	resumed chan struct{}         // closed by Resume
	conns   map[net.Conn]struct{} // the clients' connections, closed at the end
}

// StallingFront starts a relay to s for the test's duration.
func (s *Server) StallingFront(t testing.TB) *StallingFront {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &StallingFront{Config: s.Config(), conns: map[net.Conn]struct{}{}}
	f.Config.Endpoint = "http://" + l.Addr().String()
	var relays sync.WaitGroup
	t.Cleanup(func() {
		l.Close()
		f.Resume()
		f.mu.Lock()
		for c := range f.conns {
			c.Close()
		}
		f.mu.Unlock()
		relays.Wait()
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			f.mu.Lock()
			f.conns[c] = struct{}{}
			f.mu.Unlock()
			relays.Add(1)
			go func() { defer relays.Done(); f.relay(c, s.Addr) }()
		}
	}()
	return f
}

// Stall holds every byte from now on.
func (f *StallingFront) Stall() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.stalled {
		f.stalled, f.resumed = true, make(chan struct{})
	}
}

// Resume lets bytes through again.
func (f *StallingFront) Resume() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stalled {
		f.stalled = false
		close(f.resumed)
	}
}

// hold waits while the front is stalled.
func (f *StallingFront) hold() {
	f.mu.Lock()
	stalled, resumed := f.stalled, f.resumed
	f.mu.Unlock()
	if stalled {
		<-resumed
	}
}

func (f *StallingFront) relay(client net.Conn, addr string) {
	defer func() {
		client.Close()
		f.mu.Lock()
		delete(f.conns, client)
		f.mu.Unlock()
	}()
	server, err := net.Dial("tcp", addr)
	if err != nil {
		return
	}
	defer server.Close()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		defer func() { done <- struct{}{} }()
		buf := make([]byte, 32<<10)
		for {
			f.hold()
			n, err := src.Read(buf)
			f.hold() // bytes read as the stall began are held too
			if n > 0 {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				if err != io.EOF {
					return
				}
				if tc, ok := dst.(*net.TCPConn); ok {
					tc.CloseWrite()
				}
				return
			}
		}
	}
	go pipe(server, client)
	go pipe(client, server)
	<-done
	client.Close()
	server.Close()
	<-done
}

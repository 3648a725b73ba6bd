package handoff

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// AwaitClose waits while the mounter holds the connection, returns true
// when the mounter closes it, and false at once when nothing listens.
func TestAwaitClose(t *testing.T) {
	socket := filepath.Join(t.TempDir(), SocketName)
	l, err := Listen(socket)
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan *net.UnixConn, 1)
	go func() {
		c, err := l.AcceptUnix()
		if err == nil {
			accepted <- c
		}
	}()
	result := make(chan bool, 1)
	go func() { result <- AwaitClose(context.Background(), socket) }()
	conn := <-accepted
	select {
	case r := <-result:
		t.Fatalf("returned %v while the mounter held the connection", r)
	case <-time.After(100 * time.Millisecond):
	}
	conn.Close() // the mounter ends, or its deadline passes
	select {
	case r := <-result:
		if !r {
			t.Fatal("false when the mounter closed a connection it had taken; want true")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("still waiting 10 s after the mounter closed the connection")
	}
	l.Close() // nothing listens now: the socket file stays, as after a crash
	if AwaitClose(context.Background(), socket) {
		t.Fatal("true with nothing listening; want false")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if AwaitClose(ctx, socket) {
		t.Fatal("true after its context ended")
	}
}

package handoff

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A handle a mounter lends reaches CallFD, the same open file (a pipe
// stands for /dev/fuse), close-on-exec; the mounter's copy is closed once
// sent; Call, which asks for no handle, closes one it is sent.
func TestALentHandleArrivesOnce(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	served, err := DupHandle(int(r.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(served)
	socket := filepath.Join(t.TempDir(), SocketName)
	l, err := Listen(socket)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go Serve(ctx, l, func(req Request, fd int) Reply {
		dup, err := DupHandle(served)
		if err != nil {
			return Reply{Error: err.Error()}
		}
		return Reply{OK: true, Serving: true, Source: "objfuse:b/", Lent: dup}
	})
	pipe := pipeName(t, int(r.Fd()))
	before := openHandlesOn(t, pipe)
	rep, fd, err := CallFD(ctx, socket, Request{Op: OpLend}, -1)
	if err != nil || fd < 0 || !rep.Serving || rep.Source != "objfuse:b/" {
		t.Fatalf("lend: %+v, handle %d, %v", rep, fd, err)
	}
	if got := pipeName(t, fd); got != pipe {
		t.Fatalf("lent %s, want %s", got, pipe)
	}
	if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Fatalf("the lent handle is not close-on-exec (%#x, %v)", flags, err)
	}
	syscall.Close(fd)
	if _, err := Call(ctx, socket, Request{Op: OpLend}, -1); err != nil {
		t.Fatal(err)
	}
	if n := openHandlesOn(t, pipe); n != before {
		t.Fatalf("%d handles on the pipe after the calls, %d before: one was kept", n, before)
	}
}

// A mounter is not trusted with what it attaches: more than one handle,
// or a handle with a refusal, fails the call and every handle sent is
// closed.
func TestUnaskedHandlesAreClosed(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	pipe := pipeName(t, int(r.Fd()))
	before := openHandlesOn(t, pipe)
	for _, tc := range []struct {
		name string
		rep  Reply
		fds  []int
		want string
	}{
		{"two handles", Reply{OK: true}, []int{int(r.Fd()), int(r.Fd())}, "at most 1"},
		{"five handles", Reply{OK: true}, []int{int(r.Fd()), int(r.Fd()), int(r.Fd()), int(r.Fd()), int(r.Fd())}, "more handles"},
		{"with a refusal", Reply{Error: "no"}, []int{int(r.Fd())}, "refusal"},
	} {
		socket := rawMounter(t, tc.rep, tc.fds)
		_, fd, err := CallFD(t.Context(), socket, Request{Op: OpLend}, -1)
		if err == nil || fd != -1 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: handle %d, %v; want an error saying %q", tc.name, fd, err, tc.want)
		}
		if n := openHandlesOn(t, pipe); n != before {
			t.Errorf("%s: %d handles on the pipe, %d before", tc.name, n, before)
		}
	}
}

// rawMounter answers one request at a socket with rep and fds attached,
// as no well-behaved mounter would.
func rawMounter(t *testing.T, rep Reply, fds []int) string {
	t.Helper()
	socket := filepath.Join(t.TempDir(), SocketName)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: socket, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		conn, err := l.AcceptUnix()
		if err != nil {
			return
		}
		defer conn.Close()
		conn.Read(make([]byte, maxRequest))
		body, _ := json.Marshal(rep)
		conn.WriteMsgUnix(body, syscall.UnixRights(fds...), nil)
	}()
	return socket
}

// pipeName is what /proc names the open file fd is, e.g. "pipe:[123]".
func pipeName(t *testing.T, fd int) string {
	t.Helper()
	name, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		t.Fatal(err)
	}
	return name
}

// A mounter that accepts and never answers fails the call at its
// deadline (and the failed read's counts are no slice bounds).
func TestASilentMounterTimesOut(t *testing.T) {
	socket := filepath.Join(t.TempDir(), SocketName)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: socket, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if _, fd, err := CallFD(ctx, socket, Request{Op: OpStatus}, -1); err == nil || fd != -1 {
		t.Fatalf("a silent mounter: handle %d, %v; want a timeout", fd, err)
	}
}

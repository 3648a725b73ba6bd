package handoff

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A request that cannot be served (not JSON, an op this mounter does not
// know) is answered with why, and the handle it carried is closed: the
// mounter keeps no FUSE connection nobody serves.
func TestARefusedRequestKeepsNoHandle(t *testing.T) {
	socket := filepath.Join(t.TempDir(), SocketName)
	l, err := Listen(socket)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	served := make(chan Request, 4)
	go Serve(ctx, l, func(req Request, fd int) Reply {
		served <- req
		return Reply{OK: true}
	})
	carried := filepath.Join(t.TempDir(), "carried")
	for _, tc := range []struct{ body, want string }{
		{`{"op":`, "bad request"},
		{`{"op":"reboot"}`, `unknown op "reboot"`},
		{strings.Repeat(" ", maxRequest), "less than"},
	} {
		f, err := os.Create(carried)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := send(socket, []byte(tc.body), int(f.Fd()))
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if rep.OK || !strings.Contains(rep.Error, tc.want) {
			t.Fatalf("answer to %.20q: %+v, want an error with %q", tc.body, rep, tc.want)
		}
		if n := openHandlesOn(t, carried); n != 0 {
			t.Fatalf("after %.20q the mounter still holds %d handle(s) it was sent", tc.body, n)
		}
	}
	select {
	case req := <-served:
		t.Fatalf("a refused request reached the handler: %+v", req)
	default:
	}
	if rep, err := Call(t.Context(), socket, Request{Op: OpStatus}, -1); err != nil || !rep.OK {
		t.Fatalf("a good request after them: %+v, %v", rep, err)
	}
}

// send writes body with fd attached, as Call does, and reads the answer.
func send(socket string, body []byte, fd int) (Reply, error) {
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: socket, Net: "unix"})
	if err != nil {
		return Reply{}, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(time.Minute))
	if _, _, err := conn.WriteMsgUnix(body, syscall.UnixRights(fd), nil); err != nil {
		return Reply{}, err
	}
	conn.CloseWrite()
	return readReply(conn)
}

// openHandlesOn counts this process's descriptors open on path.
func openHandlesOn(t *testing.T, path string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && target == path {
			n++
		}
	}
	return n
}

// An answer bigger than maxReply is refused, not read into the node
// plugin's memory whole.
// The node plugin connects only to a socket at the mounter's socket path,
// never through a symlink there, nor to a file that is not a socket: the
// directory is the (unprivileged) mounter's, and it must not point the
// (privileged) node plugin at another socket of the node. A socket deep
// in kubelet's directories, past what a sockaddr_un holds, is reached.
func TestCallConnectsToNoSymlink(t *testing.T) {
	elsewhere := filepath.Join(t.TempDir(), "elsewhere.sock")
	l, err := Listen(elsewhere)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go Serve(ctx, l, func(req Request, fd int) Reply { return Reply{OK: true} })
	if _, err := Call(ctx, elsewhere, Request{Op: OpStatus}, -1); err != nil {
		t.Fatalf("the socket itself: %v", err)
	}
	dir := t.TempDir()
	link := filepath.Join(dir, SocketName)
	if err := os.Symlink(elsewhere, link); err != nil {
		t.Fatal(err)
	}
	if _, err := Call(ctx, link, Request{Op: OpStatus}, -1); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("through a symlink: %v, want it refused as not a socket", err)
	}
	plain := filepath.Join(dir, "plain")
	os.WriteFile(plain, nil, 0o600)
	if _, err := Call(ctx, plain, Request{Op: OpStatus}, -1); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("a plain file: %v, want it refused as not a socket", err)
	}
	deep := t.TempDir()
	for len(deep) <= maxSocketPath {
		deep = filepath.Join(deep, "kubernetes.io~empty-dir")
	}
	if err := os.MkdirAll(deep, 0o700); err != nil {
		t.Fatal(err)
	}
	l, err = Listen(filepath.Join(deep, SocketName))
	if err != nil {
		t.Fatal(err)
	}
	go Serve(ctx, l, func(req Request, fd int) Reply { return Reply{OK: true} })
	if _, err := Call(ctx, filepath.Join(deep, SocketName), Request{Op: OpStatus}, -1); err != nil {
		t.Fatalf("a socket at a long path: %v", err)
	}
}

func TestAnOversizedReplyIsRefused(t *testing.T) {
	big := `{"ok":true,"error":"` + strings.Repeat("x", maxReply) + `"}`
	if _, err := readReply(strings.NewReader(big)); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("an answer of %d bytes: %v", len(big), err)
	}
	if _, err := readReply(strings.NewReader("")); err == nil {
		t.Fatal("no answer taken for one")
	}
}

func FuzzParseRequest(f *testing.F) {
	g := uint32(2000)
	for _, req := range []Request{{Op: OpServe, MountGroup: &g}, {Op: OpStatus}, {Op: OpExit}} {
		b, _ := json.Marshal(req)
		f.Add(b)
	}
	f.Add([]byte(`{"op":"serve","mountGroup":-1}`))
	f.Add([]byte(`{"op":"status","unknown":[1,2]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := parseRequest(body)
		if err != nil {
			return
		}
		again, _ := json.Marshal(req)
		back, err := parseRequest(again)
		if err != nil {
			t.Fatalf("%q parsed as %+v, which does not parse back: %v", body, req, err)
		}
		if b, _ := json.Marshal(back); !bytes.Equal(b, again) {
			t.Fatalf("%q: %s, then %s", body, again, b)
		}
	})
}

func FuzzReadReply(f *testing.F) {
	for _, rep := range []Reply{
		{OK: true, Serving: true, Source: "bucket/prefix", PID: 7},
		{Error: "refused", Health: &Health{Problem: "access denied", ProblemKind: ProblemAccess, ProblemSince: time.Date(2026, 11, 26, 5, 0, 0, 0, time.UTC), LostUploads: 2, Conflicts: 1, LastConflict: `"f"`}},
	} {
		b, _ := json.Marshal(rep)
		f.Add(b)
	}
	f.Add([]byte(`{"ok":true,"health":{"problemSince":"not a time"}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		rep, err := readReply(bytes.NewReader(body))
		if err != nil {
			return
		}
		again, _ := json.Marshal(rep)
		if len(again) > maxReply {
			return // longer re-encoded (json escapes <, >, &): not the property
		}
		back, err := readReply(bytes.NewReader(again))
		if err != nil {
			t.Fatalf("%q read as %+v, which does not read back: %v", body, rep, err)
		}
		if b, _ := json.Marshal(back); !bytes.Equal(b, again) {
			t.Fatalf("%q: %s, then %s", body, again, b)
		}
	})
}

func FuzzReceivedFDs(f *testing.F) {
	f.Add(syscall.UnixRights(3))
	f.Add(syscall.UnixRights(3, 4, 5))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, oob []byte) {
		// Parsing only: the numbers are not this process's to close.
		if fds := receivedFDs(oob); len(fds) > len(oob)/4 {
			t.Fatalf("%d descriptors from %d bytes", len(fds), len(oob))
		}
	})
}

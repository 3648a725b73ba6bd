package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/objfuse/objfuse/mounter-pod/handoff"
	"github.com/objfuse/objfuse/mounter-pod/mounts"
	"github.com/objfuse/objfuse/test/miniotest"
)

// TestLendTheServedHandle: a node plugin that restarted asks the mounter
// for the FUSE handle it serves (OpLend) and gets a handle of the very
// connection mounted at the mountpoint, which outlives the lender's
// release; a mounter serving nothing refuses to lend.
func TestLendTheServedHandle(t *testing.T) {
	srv := miniotest.Start(t)
	m := startHandoff(t, srv)
	ctx := context.Background()
	if _, fd, err := handoff.CallFD(ctx, m.sock, handoff.Request{Op: handoff.OpLend}, -1); err == nil || fd != -1 || !strings.Contains(err.Error(), "not serving") {
		t.Fatalf("lend while serving nothing: handle %d, %v; want refused", fd, err)
	}
	m.serve(t)
	rep, fd, err := handoff.CallFD(ctx, m.sock, handoff.Request{Op: handoff.OpLend}, -1)
	if err != nil || fd < 0 || !rep.Serving {
		t.Fatalf("lend: %+v, handle %d, %v", rep, fd, err)
	}
	defer syscall.Close(fd)
	sys := mounts.System{}
	conn, err := sys.Connection(fd)
	if err != nil {
		t.Fatalf("the lent handle: %v", err)
	}
	mnt, ok, err := mounts.Mounted(sys, m.mnt)
	if err != nil || !ok {
		t.Fatalf("mount at %s: %v", m.mnt, err)
	}
	if conn != mnt.Minor {
		t.Fatalf("lent a handle of connection %d; the mount's is %d", conn, mnt.Minor)
	}
	if err := os.WriteFile(filepath.Join(m.mnt, "after-lend"), []byte("ok"), 0o644); err != nil {
		t.Fatalf("the mount after lending: %v", err)
	}
	// Unmounted, the connection ends for every handle of it.
	m.release(t)
	if _, err := sys.Connection(fd); !errors.Is(err, mounts.ErrNoConnection) {
		t.Fatalf("the lent handle after the unmount: %v, want ErrNoConnection", err)
	}
}

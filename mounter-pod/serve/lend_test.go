package serve

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"testing"
)

// The mounter's duplicate of its served handle: none to lend before it
// serves or after the connection ended; while held, each loan is a new
// handle of the same open file.
func TestServedHandleIsLentWhileHeld(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	var h servedHandle
	if fd, ok, err := h.lend(); ok || err != nil || fd != -1 {
		t.Fatalf("lend before keep: %d %v %v", fd, ok, err)
	}
	if err := h.keep(int(r.Fd())); err != nil {
		t.Fatal(err)
	}
	want := fdName(t, int(r.Fd()))
	for range 2 {
		fd, ok, err := h.lend()
		if !ok || err != nil || fd <= 2 || fdName(t, fd) != want || fd == int(r.Fd()) {
			t.Fatalf("lend: %d %v %v, want a new handle of %s", fd, ok, err, want)
		}
		syscall.Close(fd)
	}
	h.drop()
	h.drop()
	if _, ok, _ := h.lend(); ok {
		t.Fatal("lent after drop")
	}
	m := &mounter{cfg: Config{Bucket: "b", Logger: slog.New(slog.DiscardHandler)}}
	if rep := m.lend(-1); rep.OK || rep.Lent != 0 || !strings.Contains(rep.Error, "not serving") {
		t.Fatalf("a mounter serving nothing lends: %+v", rep)
	}
}

func fdName(t *testing.T, fd int) string {
	t.Helper()
	name, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		t.Fatal(err)
	}
	return name
}

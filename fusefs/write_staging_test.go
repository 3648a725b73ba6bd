package fusefs_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/objfuse/objfuse/fusefs"
	"github.com/objfuse/objfuse/fusefs/store/memstore"
)

// A staging file that cannot grow (past StagingLimit, or on a full disk)
// fails the write with ENOSPC, not EIO, and loses nothing written before
// it: closing the file uploads all of that.
func TestStagingFullIsENOSPC(t *testing.T) {
	const room = 1 << 20
	tests := []struct {
		name string
		opts func(t *testing.T) fusefs.Options
	}{
		{"past the staging limit", func(t *testing.T) fusefs.Options {
			return fusefs.Options{StagingLimit: room}
		}},
		{"on a full disk", func(t *testing.T) fusefs.Options {
			dir := t.TempDir()
			if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
				t.Fatalf("mount a 1 MiB tmpfs (as root, like the FUSE mounts): %v", err)
			}
			t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
			return fusefs.Options{StagingDir: dir}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := memstore.New()
			dir := mountFS(t, st, tc.opts(t))
			p := filepath.Join(dir, "f")
			h, err := os.Create(p)
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			// An overwrite moves the file to staging; then it grows there.
			chunk := randomBytes(64 << 10)
			if _, err := h.Write(chunk); err != nil {
				t.Fatal(err)
			}
			if _, err := h.WriteAt(chunk[:10], 0); err != nil {
				t.Fatal(err)
			}
			var want []byte
			want = append(want, chunk...)
			var werr error
			for len(want) <= 2*room {
				if _, werr = h.Write(chunk); werr != nil {
					break
				}
				want = append(want, chunk...)
			}
			wantErrno(t, "a write past the room for staging", werr, syscall.ENOSPC)
			if err := h.Close(); err != nil {
				t.Fatalf("close after ENOSPC: %v", err)
			}
			sameBytes(t, "stored", stored(t, st, "f"), want)
		})
	}
}

// A file written in order streams; one whose write lands elsewhere than
// where the last ended goes on in a staging file, and that is counted
// (the metric unordered_spills_total), content intact.
func TestAnUnorderedWriteIsCountedAsASpill(t *testing.T) {
	// Without the writeback cache whatever the suite's mode
	// (writebackMounts): there the kernel orders the WRITEs.
	st := memstore.New()
	f, err := fusefs.New(st, fusefs.Options{StagingDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	unmount, err := mountFor(t, f, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
		f.Close()
	})
	chunk := randomBytes(64 << 10)
	write := func(name string, offs ...int64) []byte {
		h, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		want := make([]byte, 0)
		for _, off := range offs {
			if _, err := h.WriteAt(chunk, off); err != nil {
				t.Fatal(err)
			}
			want = append(want, make([]byte, max(0, int(off)+len(chunk)-len(want)))...)
			copy(want[off:], chunk)
		}
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
		sameBytes(t, name+" stored", stored(t, st, name), want)
		return want
	}
	write("inorder", 0, 64<<10, 128<<10)
	if n := f.Stats().UnorderedSpills.Load(); n != 0 {
		t.Fatalf("a file written in order spilled %d times", n)
	}
	write("ahead", 0, 256<<10, 64<<10)
	if n := f.Stats().UnorderedSpills.Load(); n != 1 {
		t.Fatalf("a file written out of order counted %d spills, want 1", n)
	}
}

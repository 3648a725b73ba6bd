package fusefs_test

import (
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/objfuse/objfuse/fusefs"
	"github.com/objfuse/objfuse/fusefs/store"
	"github.com/objfuse/objfuse/fusefs/store/memstore"
)

// TestAsyncClose: close returns before the upload, the object appears
// right after, and a failed upload is reported by the next fsync.
func TestAsyncClose(t *testing.T) {
	st := memstore.New()
	var failPuts atomic.Bool
	st.FailWith = func(op, key string) error {
		if op == "put" && failPuts.Load() {
			return store.ErrUnavailable
		}
		return nil
	}
	f, dir := mountFSOf(t, st, fusefs.Options{AsyncClose: true})

	writeFile(t, filepath.Join(dir, "a"), []byte("async"))
	eventually(t, 10*time.Second, "the object after an async close", func() bool {
		_, err := st.Head(t.Context(), "a")
		return err == nil
	})
	sameBytes(t, "store", stored(t, st, "a"), []byte("async"))

	failPuts.Store(true)
	p := filepath.Join(dir, "b")
	if err := os.WriteFile(p, []byte("lost"), 0o644); err != nil {
		t.Fatalf("async close reported %v before the upload ran", err)
	}
	eventually(t, 10*time.Second, "the failure to be counted", func() bool {
		return f.Stats().AsyncUploadErrors.Load() == 1
	})
	failPuts.Store(false)
	h, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("fsync after a failed async upload: %v, want EIO", err)
	}
	h.Close()
}

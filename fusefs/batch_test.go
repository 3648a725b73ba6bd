package fusefs_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/objfuse/objfuse/fusefs"
	"github.com/objfuse/objfuse/fusefs/store/s3store"
	"github.com/objfuse/objfuse/test/miniotest"
)

// Many files closed asynchronously on MinIO go up in shared requests,
// and each is stored as if uploaded alone: a fresh mount shows its bytes,
// its mode and its mtime.
func TestAsyncClosesShareRequestsOnMinIO(t *testing.T) {
	srv := miniotest.Start(t)
	var puts atomic.Int32
	cfg := srv.Config()
	cfg.Observe = func(op, _ string, _ time.Duration) {
		if op == "PUT" || op == "PUT_BATCH" {
			puts.Add(1)
		}
	}
	bucket := srv.Bucket()
	st, err := s3store.New(cfg, bucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Check(t.Context()); err != nil {
		t.Fatal(err)
	}
	_, dir := mountFSOf(t, st, fusefs.Options{AsyncClose: true})
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	const n = 400
	mtime := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	content := func(i int) []byte { return []byte(fmt.Sprintf("file %d %s", i, make([]byte, i*7))) }
	// Eight writers, so that closes come faster than two requests at a
	// time can take them one by one, even under the race detector.
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 8 {
				if err := writeWithAttrs(filepath.Join(dir, "d", fmt.Sprintf("f%03d", i)), content(i), i%3 == 0, mtime); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	eventually(t, time.Minute, "every file in S3", func() bool {
		k := 0
		for e, err := range st.List(t.Context(), "d/", "", true) {
			if err != nil {
				return false
			}
			if e.Key != "d/" {
				k++
			}
		}
		return k == n
	})
	if got := puts.Load(); got > n/2 {
		t.Errorf("%d files took %d PUT requests: not batched", n, got)
	}
	t.Logf("%d files in %d PUT requests", n, puts.Load())

	fresh, err := s3store.New(srv.Config(), bucket)
	if err != nil {
		t.Fatal(err)
	}
	_, again := mountFSOf(t, fresh, fusefs.Options{})
	for i := range n {
		p := filepath.Join(again, "d", fmt.Sprintf("f%03d", i))
		got, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		sameBytes(t, p, got, content(i))
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 && (fi.Mode().Perm() != 0o600 || !fi.ModTime().Equal(mtime)) {
			t.Errorf("%s: mode %v mtime %v after a remount, want 0600 and %v", p, fi.Mode(), fi.ModTime(), mtime)
		}
		if i%3 != 0 && fi.Mode().Perm() != 0o644 {
			t.Errorf("%s: mode %v after a remount, want 0644", p, fi.Mode())
		}
	}
}

// writeWithAttrs writes a file and, with chmod, sets its mode to 0600
// and its mtime while it is open, so that its one upload carries them.
func writeWithAttrs(p string, data []byte, chmod bool, mtime time.Time) error {
	f, err := os.Create(p)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		return err
	}
	if chmod {
		if err := f.Chmod(0o600); err != nil {
			return err
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			return err
		}
	}
	return f.Close()
}

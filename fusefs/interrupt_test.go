package fusefs_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/objfuse/objfuse/fusefs"
)

// A Go program's own preemption and GC signals interrupt its system
// calls; the kernel then cancels the FUSE request. A cancelled lookup is
// EINTR (which callers retry), and the upload a close(2)
// started must go on regardless: every close succeeds and every file is
// in S3. (Before uploads were made uninterruptible, about 2% of closes
// here failed with EIO and their files were lost.)
func TestInterruptedClosesKeepData(t *testing.T) {
	st := backends()[1].fresh(t) // real MinIO: the HTTP request is what a cancel kills
	dir := mountFS(t, st, fusefs.Options{})
	stop := make(chan struct{})
	var garbage atomic.Int64
	go func() { // keep the GC, and so its preemption signals, busy
		for {
			select {
			case <-stop:
				return
			default:
				garbage.Add(int64(len(make([]byte, 1<<20))))
			}
		}
	}()
	defer close(stop)
	const writers, files = 4, 150
	var wg sync.WaitGroup
	errs := make(chan error, writers*files)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < files; i++ {
				p := filepath.Join(dir, fmt.Sprintf("w%d-%03d", w, i))
				if err := os.WriteFile(p, randomBytes(4096), 0o644); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	failed := 0
	for err := range errs {
		if failed++; failed <= 3 {
			t.Errorf("write: %v", err)
		}
	}
	if failed > 0 {
		t.Fatalf("%d of %d closes failed", failed, writers*files)
	}
	for w := 0; w < writers; w++ {
		for i := 0; i < files; i++ {
			if b := stored(t, st, fmt.Sprintf("w%d-%03d", w, i)); len(b) != 4096 {
				t.Fatalf("w%d-%03d: %d bytes in S3", w, i, len(b))
			}
		}
	}
}

package fusefs_test

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/objfuse/objfuse/fusefs"
)

// A Go program's own preemption and GC signals interrupt its system
// calls; the kernel then cancels the FUSE request. The upload a close(2)
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

// TestSignalsDoNotFailSystemCalls: a program that handles a signal (here
// SIGUSR1, sent to the very thread making the calls, as timers and Go's
// preemption do) has the kernel interrupt its FUSE request. stat, unlink,
// rename, readdir, read and readlink must still answer as on any
// filesystem: EINTR from them breaks programs that never expect it.
func TestSignalsDoNotFailSystemCalls(t *testing.T) {
	st := backends()[1].fresh(t) // real MinIO: requests take long enough to be hit
	// Attributes expire at once, so that every stat asks S3 again.
	// The grace outlasts any answer of a loaded MinIO: what is tested is
	// that a signal alone fails no call.
	dir := mountFS(t, st, fusefs.WithInterruptGrace(fusefs.Options{StatTTL: time.Nanosecond}, time.Minute))
	for i := range 40 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d", i)), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "big"), randomBytes(8<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("big", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGUSR1) // handled, so not fatal
	defer func() {
		signal.Stop(sigs)
		close(sigs)
	}()
	go func() {
		for range sigs {
		}
	}()

	tids := make(chan int)
	stop := make(chan struct{})
	var bombed sync.WaitGroup
	bombed.Add(1)
	go func() { // signal the calling thread all the time
		defer bombed.Done()
		tid := <-tids
		every := time.NewTicker(50 * time.Microsecond) // a pace, not a wait for anything
		defer every.Stop()
		for {
			select {
			case <-stop:
				return
			case <-every.C:
				unix.Tgkill(os.Getpid(), tid, syscall.SIGUSR1)
			}
		}
	}()
	var eintr []string
	func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		tids <- unix.Gettid()
		defer close(stop)
		note := func(what string, err error) {
			if errors.Is(err, syscall.EINTR) {
				eintr = append(eintr, what)
			}
		}
		var s unix.Stat_t
		for i := range 40 {
			name := filepath.Join(dir, fmt.Sprintf("f%03d", i))
			note("stat of a name never looked up", unix.Stat(filepath.Join(dir, fmt.Sprintf("new%03d", i)), &s))
			note("stat", unix.Stat(name, &s))
			note("rename", unix.Rename(name, name+".r"))
			note("unlink", unix.Unlink(name+".r"))
			fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
			if err != nil {
				note("open dir", err)
				continue
			}
			buf := make([]byte, 4096)
			for {
				n, err := unix.Getdents(fd, buf)
				note("getdents", err)
				if n <= 0 || err != nil {
					break
				}
			}
			unix.Close(fd)
			// Reads that go to S3: the kernel's cache of the file is
			// dropped first.
			if fd, err := unix.Open(filepath.Join(dir, "big"), unix.O_RDONLY, 0); err != nil {
				note("open", err)
			} else {
				unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED)
				_, err := unix.Pread(fd, buf, int64(i)*100_000)
				note("read", err)
				unix.Close(fd)
			}
			_, err = unix.Readlink(filepath.Join(dir, "link"), buf)
			note("readlink", err)
		}
	}()
	bombed.Wait()
	if len(eintr) > 0 {
		t.Fatalf("%d system calls failed with EINTR: %v", len(eintr), eintr)
	}
}

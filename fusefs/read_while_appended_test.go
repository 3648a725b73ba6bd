package fusefs_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/objfuse/objfuse/fusefs"
	"github.com/objfuse/objfuse/fusefs/store/memstore"
	"golang.org/x/sys/unix"
)

// TestFreshOpensWhileAppended: one process appends and fsyncs line after
// line while another opens the file anew and reads it whole, again and
// again, through the same mount. Each read must be lines 0..k, whole:
// the kernel's pages of the file must never show a line as zeros. (An
// open that has the kernel drop its pages while a WRITE is on its way
// lets the read that follows cache the page without that WRITE's bytes,
// zeros where they go, and the kernel then moves the file's end past
// them.)
//
// It failed about once in 30 runs beside two busy loops (7 December
// 2026) with a line zeroed and the lines after it whole, while no open
// dropped the pages: the kernel's own invalidation when attributes bring
// a new mtime (AUTO_INVAL_DATA, which go-fuse asks for) had. Each fsync
// here gives a new mtime; TestANewMtimeKeepsTheKernelsPages shows that
// objfuse no longer asks for it.
func TestFreshOpensWhileAppended(t *testing.T) {
	dir := mountFS(t, memstore.New(), fusefs.Options{})
	file := filepath.Join(dir, "log")
	const lines = 1500
	var wg sync.WaitGroup
	done, stop := make(chan struct{}), make(chan struct{})
	defer wg.Wait()
	defer close(stop) // a failed read stops the writer
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(done)
		f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			t.Error(err)
			return
		}
		defer f.Close()
		for i := range lines {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := f.WriteString(strconv.Itoa(i) + "\n"); err != nil {
				t.Errorf("write %d: %v", i, err)
				return
			}
			if err := f.Sync(); err != nil {
				t.Errorf("fsync %d: %v", i, err)
				return
			}
		}
	}()
	reads := 0
	for {
		select {
		case <-done:
			t.Logf("%d whole reads while %d lines were appended", reads, lines)
			return
		default:
		}
		b, err := os.ReadFile(file)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if bad := firstBadLine(b); bad >= 0 {
			t.Fatalf("read %d: not whole lines at byte %d: %q", reads, bad, b[max(0, bad-12):min(len(b), bad+12)])
		}
		reads++
	}
}

// TestAppendersPagesAreKept: the kernel's pages of a file appended to
// and fsynced here are of the file's content after every fsync, the
// first one (which ends the stream a new file is written as) included, so
// that an open never has the kernel drop them under a WRITE on its way:
// the race TestFreshOpensWhileAppended meets only now and then.
func TestAppendersPagesAreKept(t *testing.T) {
	f, dir := mountFSOf(t, memstore.New(), fusefs.Options{})
	w, err := os.OpenFile(filepath.Join(dir, "log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for i := range 3 {
		if _, err := w.WriteString(strconv.Itoa(i) + "\n"); err != nil {
			t.Fatal(err)
		}
		if !fusefs.KeepsPages(f, "log") {
			t.Fatalf("after write %d, an open would drop the kernel's pages", i)
		}
		if err := w.Sync(); err != nil {
			t.Fatal(err)
		}
		if !fusefs.KeepsPages(f, "log") {
			t.Fatalf("after fsync %d, an open would drop the kernel's pages", i)
		}
	}
}

// TestANewMtimeKeepsTheKernelsPages: a file's new mtime (here from an
// append and fsync through another handle) does not have the kernel drop
// its pages of the file: with AUTO_INVAL_DATA it drops them when a stat
// brings the mtime, and may drop a page holding a WRITE on its way (fuse
// unlocks an up-to-date page before its WRITE is sent), so that the READ
// caching the page again has zeros where that WRITE goes. The pages in
// the kernel are seen with mincore of a shared mapping.
func TestANewMtimeKeepsTheKernelsPages(t *testing.T) {
	dir := mountFS(t, memstore.New(), fusefs.Options{})
	p := filepath.Join(dir, "log")
	const cached = 16 * 4096
	w, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	appendSynced := func(b []byte) {
		t.Helper()
		if _, err := w.Write(b); err != nil {
			t.Fatal(err)
		}
		if err := w.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	appendSynced(randomBytes(cached))
	r, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	m, err := unix.Mmap(int(r.Fd()), 0, cached, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	sum := 0
	for i := 0; i < cached; i += 4096 {
		sum += int(m[i]) // each page read in
	}
	if n := residentPages(t, m); n != cached/4096 {
		t.Fatalf("%d of %d pages in the kernel after reading them all", n, cached/4096)
	}
	before, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	// A new mtime: a store's times may be of seconds (S3's are), so
	// appends go on until the upload of one comes in a later one.
	deadline := time.Now().Add(5 * time.Second)
	for {
		appendSynced([]byte("more\n"))
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if !fi.ModTime().Equal(before.ModTime()) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the mtime stayed %v through appends for 5 s", before.ModTime())
		}
	}
	if n := residentPages(t, m); n != cached/4096 {
		t.Fatalf("%d of %d pages still in the kernel after a stat brought a new mtime (sum %d); want them all", n, cached/4096, sum)
	}
}

// residentPages counts the pages of mapping m the kernel holds.
func residentPages(t *testing.T, m []byte) int {
	t.Helper()
	vec := make([]byte, (len(m)+4095)/4096)
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatalf("mincore: %v", e)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

// firstBadLine is where b stops being the lines "0\n1\n2\n..." (a last
// line without its newline aside), or -1.
func firstBadLine(b []byte) int {
	at := 0
	for i := 0; at < len(b); i++ {
		want := []byte(fmt.Sprintf("%d\n", i))
		rest := b[at:]
		if !bytes.HasPrefix(rest, want) && !bytes.HasPrefix(want, rest) {
			return at
		}
		at += len(want)
	}
	return -1
}

package fusefs_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/objfuse/objfuse/fusefs"
	"github.com/objfuse/objfuse/fusefs/store"
	"github.com/objfuse/objfuse/fusefs/store/memstore"
	"github.com/objfuse/objfuse/fusefs/store/s3store"
	"github.com/objfuse/objfuse/mounter-pod/mounts"
	"github.com/objfuse/objfuse/test/miniotest"
	"github.com/objfuse/objfuse/test/versitytest"
)

// backend is a store the behaviour suite runs on, with a way to make a
// fresh empty bucket and read what is really stored.
type backend struct {
	name  string
	fresh func(t *testing.T) store.Store
}

var (
	minioOnce   sync.Once
	minioServer *miniotest.Server

	versityOnce   sync.Once
	versityServer *versitytest.Server
	versityStop   func()
	versityErr    error
)

// sharedVersity starts one versitygw for the package's tests.
func sharedVersity(t *testing.T) *versitytest.Server {
	versityOnce.Do(func() { versityServer, versityStop, versityErr = versitytest.StartShared() })
	if versityErr != nil {
		t.Fatal(versityErr)
	}
	return versityServer
}

// sharedMinio starts one MinIO for the package's tests.
func sharedMinio(t *testing.T) *miniotest.Server {
	minioOnce.Do(func() { minioServer = miniotest.StartShared() })
	if minioServer == nil {
		t.Fatal("minio failed to start")
	}
	return minioServer
}

func TestMain(m *testing.M) {
	if helper, ok := testHelpers[os.Getenv(helperEnv)]; ok {
		os.Exit(helper())
	}
	stop, err := mmapper.start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start the mmap helper:", err)
		os.Exit(1)
	}
	code := m.Run()
	stop()
	if minioServer != nil {
		minioServer.Close()
	}
	if versityStop != nil {
		versityStop()
	}
	os.Exit(code)
}

func backends() []backend {
	return []backend{
		{name: "memory", fresh: func(t *testing.T) store.Store { return memstore.New() }},
		{name: "minio", fresh: func(t *testing.T) store.Store {
			srv := sharedMinio(t)
			st, err := s3store.New(srv.Config(), srv.NewBucket(t))
			if err != nil {
				t.Fatal(err)
			}
			return st
		}},
		// An S3 server other than MinIO: listings without metadata, as
		// AWS S3 lists.
		{name: "versitygw", fresh: func(t *testing.T) store.Store {
			srv := sharedVersity(t)
			st, err := s3store.New(srv.Config(), srv.NewBucket(t))
			if err != nil {
				t.Fatal(err)
			}
			return st
		}},
	}
}

// mountFS mounts a filesystem over st at a new directory and unmounts it
// when the test ends.
func mountFS(t testing.TB, st store.Store, opts fusefs.Options) string {
	t.Helper()
	_, dir := mountFSOf(t, st, opts)
	return dir
}

// mountFSOf is mountFS that also returns the filesystem, for its counters.
func mountFSOf(t testing.TB, st store.Store, opts fusefs.Options) (*fusefs.FS, string) {
	t.Helper()
	opts.WritebackCache = opts.WritebackCache || writebackMounts
	return mountFSAsIs(t, st, opts)
}

// mountFSAsIs is mountFSOf with the writeback cache only if opts asks:
// for a test of the WRITEs a write(2) sends at once.
func mountFSAsIs(t testing.TB, st store.Store, opts fusefs.Options) (*fusefs.FS, string) {
	t.Helper()
	dir := t.TempDir()
	if opts.PartSize == 0 {
		opts.PartSize = 5 << 20 // small parts, so tests cross part boundaries cheaply
	}
	if opts.StagingDir == "" {
		opts.StagingDir = t.TempDir()
	}
	f, err := fusefs.New(st, opts)
	if err != nil {
		t.Fatal(err)
	}
	unmount, err := mountFor(t, f, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unmount(); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
		if err := f.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return f, dir
}

// takeoverMounts, set by OBJFUSE_TEST_TAKEOVER=1, runs the suites through
// takeover.FS on a FUSE handle mounted the way the node plugin mounts it:
// everything a mount does must work the same with its numbers translated.
var takeoverMounts = os.Getenv("OBJFUSE_TEST_TAKEOVER") == "1"

// writebackMounts, set by OBJFUSE_TEST_WRITEBACK=1, runs the suites on
// mounts with the kernel's writeback cache (Options.WritebackCache):
// what a program sees must hold there too, or a test says how it differs.
var writebackMounts = os.Getenv("OBJFUSE_TEST_WRITEBACK") == "1"

// writebackStale reports a change that failed under the
// writeback cache, having checked that the store still holds want (the
// other client's version): the kernel keeps the inode's size, so a
// change to a version replaced since the lookup stays on it and fails,
// when the mount learns of the other version before it. Without the
// writeback cache, or with err nil, it reports false.
func writebackStale(t *testing.T, err error, st store.Store, key, want string) bool {
	t.Helper()
	if !writebackMounts || err == nil {
		return false
	}
	// ESTALE from the write, or EIO from the close, which is how the
	// kernel reports a failed writeback of pages it held.
	if !errors.Is(err, syscall.ESTALE) && !errors.Is(err, syscall.EIO) {
		t.Fatalf("a change to a version replaced since the lookup: %v, want ESTALE or EIO", err)
	}
	if got := string(stored(t, st, key)); got != want {
		t.Fatalf("the store holds %q, want the other client's %q", got, want)
	}
	return true
}

// mountFor mounts f at dir, through takeover.FS when takeoverMounts, and
// returns how to unmount it.
func mountFor(t testing.TB, f *fusefs.FS, dir string) (unmount func() error, err error) {
	if !takeoverMounts {
		srv, err := f.Mount(dir, "objfuse:test", true)
		if err != nil {
			return nil, err
		}
		return srv.Unmount, nil
	}
	fd, err := mounts.System{}.MountFUSE(dir, "objfuse:test", false)
	if err != nil {
		return nil, err
	}
	srv, _, err := f.ServeTakeover(fmt.Sprintf("/dev/fd/%d", fd), "objfuse:test", filepath.Join(t.TempDir(), "journal"), nil)
	if err == nil {
		err = (mounts.System{}).DisablePoll(dir)
	}
	if err != nil {
		syscall.Unmount(dir, syscall.MNT_DETACH)
		return nil, err
	}
	return func() error {
		if err := syscall.Unmount(dir, 0); err != nil {
			return err
		}
		srv.Wait()
		return nil
	}, nil
}

// stored reads an object straight from the store, bypassing the mount.
func stored(t testing.TB, st store.Store, key string) []byte {
	t.Helper()
	body, err := st.Get(context.Background(), key, store.AnyVersion, 0, -1)
	if err != nil {
		t.Fatalf("read %q from the store: %v", key, err)
	}
	defer body.Close()
	b, err := io.ReadAll(body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func put(t testing.TB, st store.Store, key string, data []byte) {
	t.Helper()
	if _, err := st.Put(context.Background(), key, bytes.NewReader(data), int64(len(data)), nil); err != nil {
		t.Fatalf("put %q: %v", key, err)
	}
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if !pollUntil(d, cond) {
		t.Fatalf("timed out after %v waiting for %s", d, what)
	}
}

// pollUntil polls cond until it holds (true) or d has passed (false).
var pollUntil = fusefs.PollUntil

package fusefs_test

import (
	"context"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/objfuse/objfuse/fusefs"
	"github.com/objfuse/objfuse/fusefs/store"
	"github.com/objfuse/objfuse/fusefs/store/memstore"
)

// headGate counts a store's HEADs and holds those of keys under
// gatePrefix until gateAt are in flight together. READDIRPLUS looks entries up one at a time, so only
// HEADs sent ahead of the lookups can reach the gate; one not reached
// within gateWait opens anyway, and the test sees reached=false. With bare
// set it lists without metadata, as every S3 server but MinIO does.
type headGate struct {
	store.Store
	bare            bool
	gatePrefix      string
	gateAt          int64
	heads, inFlight atomic.Int64
	reached         atomic.Bool
	open            chan struct{}
	opened          sync.Once
	mu              sync.Mutex
	perKey          map[string]int
}

const gateWait = 10 * time.Second

func newHeadGate(st store.Store, bare bool, gatePrefix string, gateAt int64) *headGate {
	return &headGate{Store: st, bare: bare, gatePrefix: gatePrefix, gateAt: gateAt, open: make(chan struct{}), perKey: map[string]int{}}
}

func (s *headGate) Head(ctx context.Context, key string) (store.Object, error) {
	s.heads.Add(1)
	s.mu.Lock()
	s.perKey[key]++
	s.mu.Unlock()
	if !strings.HasPrefix(key, s.gatePrefix) || key == s.gatePrefix {
		return s.Store.Head(ctx, key)
	}
	defer s.inFlight.Add(-1)
	if s.inFlight.Add(1) >= s.gateAt {
		s.reached.Store(true)
		s.opened.Do(func() { close(s.open) })
	}
	select {
	case <-s.open:
	case <-time.After(gateWait):
		s.opened.Do(func() { close(s.open) })
	case <-ctx.Done():
		return store.Object{}, ctx.Err()
	}
	return s.Store.Head(ctx, key)
}

func (s *headGate) List(ctx context.Context, prefix, startAfter string, recursive bool) iter.Seq2[store.Entry, error] {
	inner := s.Store.List(ctx, prefix, startAfter, recursive)
	if !s.bare {
		return inner
	}
	return func(yield func(store.Entry, error) bool) {
		for e, err := range inner {
			if err == nil && !e.IsPrefix() {
				e.Object.Metadata = nil
			}
			if !yield(e, err) {
				return
			}
		}
	}
}

func (s *headGate) headsOf(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.perKey[key]
}

// lsLong lists dir and lstats every entry, as `ls -l` does.
func lsLong(t *testing.T, dir string) map[string]os.FileInfo {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]os.FileInfo{}
	for _, e := range entries {
		fi, err := os.Lstat(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = fi
	}
	return out
}

// On servers whose listings carry no metadata (AWS S3, versitygw, all but
// MinIO), `ls -l` shows each file's own mode and owner, from a HEAD each:
// sent ahead of the lookups, many at once, and never twice. On every
// server, a subdirectory's mode comes from its marker.
func TestLsLongWithoutListingMetadata(t *testing.T) {
	const files = 60
	type setup struct {
		name string
		st   func(t *testing.T) store.Store
		bare bool // list without metadata on purpose; versitygw does anyway
	}
	var setups []setup
	for _, be := range backends() {
		// MinIO and the memory store list with metadata: made bare here.
		setups = append(setups, setup{be.name, be.fresh, be.name != "versitygw"})
	}
	for _, tc := range setups {
		t.Run(tc.name, func(t *testing.T) {
			st := tc.st(t)
			opts := fusefs.Options{StatTTL: time.Minute, ListTTL: time.Minute}
			// Written through one mount, with their modes, a symlink and
			// a subdirectory among them.
			first := mountFS(t, st, opts)
			d := filepath.Join(first, "d")
			if err := os.MkdirAll(filepath.Join(d, "sub"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(filepath.Join(d, "sub"), 0o700); err != nil {
				t.Fatal(err)
			}
			for i := range files {
				p := filepath.Join(d, fmt.Sprintf("f%03d", i))
				if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
					t.Fatal(err)
				}
				if i%10 == 3 {
					if err := os.Chmod(p, 0o600); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := os.Symlink("f000", filepath.Join(d, "link")); err != nil {
				t.Fatal(err)
			}
			// A directory with no marker, only a key below it.
			put(t, st, "d/implicit/f", []byte("x"))

			gate := newHeadGate(st, tc.bare, "d/", 8)
			d = filepath.Join(mountFS(t, gate, opts), "d")
			got := lsLong(t, d)
			if len(got) != files+3 {
				t.Fatalf("ls -l shows %d entries, want %d", len(got), files+3)
			}
			for i := range files {
				name := fmt.Sprintf("f%03d", i)
				want := os.FileMode(0o644)
				if i%10 == 3 {
					want = 0o600
				}
				if fi := got[name]; fi.Mode() != want {
					t.Errorf("%s: mode %v, want %v", name, fi.Mode(), want)
				}
				if n := gate.headsOf("d/" + name); n != 1 {
					t.Errorf("%s: %d HEADs, want 1", name, n)
				}
			}
			if fi := got["link"]; fi.Mode()&os.ModeSymlink == 0 {
				t.Errorf("link: mode %v, want a symlink", fi.Mode())
			}
			if target, err := os.Readlink(filepath.Join(d, "link")); err != nil || target != "f000" {
				t.Errorf("readlink: %q, %v", target, err)
			}
			// A listing shows directories as prefixes: their markers
			// hold their modes.
			for name, want := range map[string]os.FileMode{"sub": os.ModeDir | 0o700, "implicit": os.ModeDir | 0o755} {
				if fi := got[name]; fi.Mode() != want {
					t.Errorf("%s: mode %v, want %v", name, fi.Mode(), want)
				}
				if n := gate.headsOf("d/" + name + "/"); n != 1 {
					t.Errorf("%s: %d HEADs of its marker, want 1", name, n)
				}
			}
			if !gate.reached.Load() {
				t.Errorf("never %d HEADs in flight at once: the lookups sent them one by one", gate.gateAt)
			}

			// Listed again while the listing is fresh: no HEAD again.
			before := gate.heads.Load()
			if again := lsLong(t, d); len(again) != len(got) || again["f003"].Mode() != 0o600 {
				t.Fatalf("second ls -l: %d entries, f003 %v", len(again), again["f003"].Mode())
			}
			if n := gate.heads.Load() - before; n != 0 {
				t.Errorf("second ls -l sent %d HEADs, want 0", n)
			}
		})
	}
}

// A reader that stops after the first entries (ls | head) costs at most
// MetaLookahead HEADs beyond those it looked up, not the whole directory.
func TestListingMetadataPrefetchStopsAhead(t *testing.T) {
	const files = 1500
	mem := memstore.New()
	for i := range files {
		put(t, mem, fmt.Sprintf("d/f%05d", i), []byte("x"))
	}
	gate := newHeadGate(mem, true, "d/", 1)
	fsys, root := mountFSOf(t, gate, fusefs.Options{})
	d := filepath.Join(root, "d")
	f, err := os.Open(d)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() { // before the unmount, which an open directory fails
		if !closed {
			f.Close()
		}
	})
	names, err := f.Readdirnames(1)
	if err != nil || len(names) != 1 || !strings.HasPrefix(names[0], "f") {
		t.Fatalf("first entry: %v, %v", names, err)
	}
	// The kernel reads entries in pages of a few dozen and looks each
	// up. The memory store answers at once, so the HEADs run ahead until
	// the lookahead stops them, and stay stopped while nobody reads.
	eventually(t, 10*time.Second, "the HEADs to stop at the lookahead", func() bool { return fusefs.PrefetchStalls(fsys) > 0 })
	bound := int64(fusefs.MetaLookahead + 200)
	if n := gate.heads.Load(); n > bound {
		t.Fatalf("%d HEADs for a reader that stopped after a page of %d entries; want at most %d", n, files, bound)
	}
	closed = true
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the HEADs in flight to end", func() bool { return gate.inFlight.Load() == 0 })
	var st syscall.Stat_t
	if err := syscall.Lstat(filepath.Join(d, fmt.Sprintf("f%05d", files-1)), &st); err != nil {
		t.Fatalf("lstat of the last file after the reader went: %v", err)
	}
}

package fusefs_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"os"
	"os/exec"
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

// countingStore counts HEADs, LISTs and listed entries, and holds the
// listings of gatePrefix while a gate is set and not yet closed.
type countingStore struct {
	store.Store
	heads, lists, entries atomic.Int64
	gatePrefix            string
	gate                  atomic.Pointer[chan struct{}]
	listing               chan struct{} // a held listing started
	failPrefix            string        // listings of it fail at once
	failing               atomic.Bool   // while set
}

func (s *countingStore) Head(ctx context.Context, key string) (store.Object, error) {
	s.heads.Add(1)
	return s.Store.Head(ctx, key)
}

func (s *countingStore) List(ctx context.Context, prefix, startAfter string, recursive bool) iter.Seq2[store.Entry, error] {
	s.lists.Add(1)
	inner := s.Store.List(ctx, prefix, startAfter, recursive)
	return func(yield func(store.Entry, error) bool) {
		if prefix == s.failPrefix && s.failing.Load() {
			yield(store.Entry{}, errors.New("listing refused"))
			return
		}
		if g := s.gate.Load(); g != nil && prefix == s.gatePrefix {
			select {
			case s.listing <- struct{}{}:
			default:
			}
			select {
			case <-*g:
			case <-ctx.Done():
				yield(store.Entry{}, ctx.Err())
				return
			}
		}
		for e, err := range inner {
			s.entries.Add(1)
			if !yield(e, err) {
				return
			}
		}
	}
}

// A stat of an unlisted file is one HEAD. When the bucket holds both "d"
// and "d/e", a listing makes d the directory, and it stays one after
// every cache has expired.
func TestLookupIsOneHeadAndListedDirectoriesWin(t *testing.T) {
	mem := memstore.New()
	put(t, mem, "plain", []byte("plain"))
	put(t, mem, "d", []byte("file d"))
	put(t, mem, "d/e", []byte("d/e"))
	// Counted on a mount whose attributes outlive the test: with short
	// ones, a stat that wakes late finds them expired and asks again.
	st := &countingStore{Store: mem}
	counted := mountFS(t, st, fusefs.Options{StatTTL: time.Hour, ListTTL: time.Hour})
	fi, err := os.Stat(filepath.Join(counted, "plain"))
	if err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("stat plain: %v, %v", fi, err)
	}
	if h, l := st.heads.Swap(0), st.lists.Swap(0); h != 1 || l != 0 {
		t.Fatalf("stat of an unlisted file sent %d HEADs and %d LISTs, want 1 and 0", h, l)
	}

	const ttl = 50 * time.Millisecond
	dir := mountFS(t, mem, fusefs.Options{StatTTL: ttl, ListTTL: ttl})

	if _, err := os.ReadDir(dir); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * ttl)
	for time.Now().Before(deadline) {
		fi, err := os.Stat(filepath.Join(dir, "d"))
		if err != nil || !fi.IsDir() {
			t.Fatalf("after a listing, d is %v (%v), want the directory", fi.Mode(), err)
		}
	}
	if got := string(readFile(t, filepath.Join(dir, "d", "e"))); got != "d/e" {
		t.Fatalf("d/e reads %q", got)
	}
}

// newCountedDir mounts a counted memory store whose listings live for
// listTTL, makes directory d in it and returns the store, its counter and
// d's path, with nothing counted yet. Attributes live for an hour: a
// short StatTTL would add the kernel's lookups of d itself.
func newCountedDir(t *testing.T, listTTL time.Duration) (*memstore.Store, *countingStore, string) {
	t.Helper()
	mem := memstore.New()
	st := &countingStore{Store: mem}
	dir := mountFS(t, st, fusefs.Options{StatTTL: time.Hour, ListTTL: listTTL})
	d := filepath.Join(dir, "d")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	st.heads.Store(0)
	st.lists.Store(0)
	return mem, st, d
}

// Creating files in a directory whose listing has expired lists it again
// once per ListTTL, instead of a HEAD and a LIST per new name; a file
// another client adds still shows up once the listing is older than the TTL.
// The counts hold however slowly the machine runs (see
// TestConcurrentCreatesShareOneRelist).
func TestCreatesAfterListingExpiresRelistOncePerTTL(t *testing.T) {
	const ttl = 20 * time.Millisecond
	mem, st, d := newCountedDir(t, ttl)

	// Long enough for the mkdir's listing to expire several times, and
	// fewer files than one listing page (larger directories are asked
	// per name).
	const span, maxFiles = 8 * ttl, 900
	start := time.Now()
	files := 0
	for files < maxFiles && (time.Since(start) < span || files < 20) {
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%04d", files)), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		files++
	}
	periods := int64(time.Since(start)/ttl) + 1
	if periods < 3 {
		t.Fatalf("%d creates took only %d TTLs: the listing never expired", files, periods)
	}
	heads, lists := st.heads.Swap(0), st.lists.Swap(0)
	t.Logf("%d creates over %d TTLs: %d HEADs, %d LISTs", files, periods, heads, lists)
	if heads != 0 || lists > periods {
		t.Fatalf("%d creates over %d TTLs sent %d HEADs and %d LISTs; want no HEAD and at most one LIST per TTL", files, periods, heads, lists)
	}

	// Another client's file: a lookup finds it once the listing that
	// said "no such file" has expired.
	put(t, mem, "d/other", []byte("other"))
	eventually(t, 10*time.Second, "another client's file to appear", func() bool {
		_, err := os.Stat(filepath.Join(d, "other"))
		return err == nil
	})
	if got := string(readFile(t, filepath.Join(d, "f0000"))); got != "x" {
		t.Fatalf("f0000 reads %q", got)
	}
}

// Concurrent creates share one listing per TTL.
//
// The counts cannot depend on how the writers are scheduled: a lookup
// that misses answers from the listing it waited for (never a HEAD, even
// when it wakes after that listing expired), and a listing starts only
// once the last one is older than the TTL, so n listings span at least
// (n-1) TTLs of the test's time, however the writers interleave.
func TestConcurrentCreatesShareOneRelist(t *testing.T) {
	const ttl = 20 * time.Millisecond
	_, st, d := newCountedDir(t, ttl)
	const writers, each = 4, 200
	start := time.Now()
	errs := make(chan error, writers)
	for w := range writers {
		go func() {
			for i := range each {
				if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("w%d-%04d", w, i)), []byte("x"), 0o644); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range writers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	periods := int64(time.Since(start)/ttl) + 1
	heads, lists := st.heads.Swap(0), st.lists.Swap(0)
	t.Logf("%d creates by %d writers over %d TTLs: %d HEADs, %d LISTs", writers*each, writers, periods, heads, lists)
	if heads != 0 || lists > periods {
		t.Fatalf("%d TTLs: %d HEADs and %d LISTs; want no HEAD and at most one LIST per TTL", periods, heads, lists)
	}
	names, err := os.ReadDir(d)
	if err != nil || len(names) != writers*each {
		t.Fatalf("listing shows %d files (%v), want %d", len(names), err, writers*each)
	}
}

// A directory another client filled is not listed whole inside a lookup.
func TestRelistStopsAtOnePage(t *testing.T) {
	mem := memstore.New()
	st := &countingStore{Store: mem}
	const ttl = 50 * time.Millisecond
	dir := mountFS(t, st, fusefs.Options{StatTTL: time.Hour, ListTTL: ttl})
	d := filepath.Join(dir, "d")
	if err := os.Mkdir(d, 0o755); err != nil { // a complete, empty listing
		t.Fatal(err)
	}
	for i := range 30000 {
		put(t, mem, fmt.Sprintf("d/o%06d", i), nil) // another client
	}
	// Missing names answer from the mkdir's listing until it expires;
	// the first miss after that lists the directory again.
	st.lists.Store(0)
	st.entries.Store(0)
	misses := 0
	eventually(t, 10*time.Second, "a lookup miss to list the directory again", func() bool {
		misses++
		if _, err := os.Stat(filepath.Join(d, fmt.Sprintf("missing-%d", misses))); !os.IsNotExist(err) {
			t.Fatalf("stat of a missing name: %v", err)
		}
		return st.lists.Load() > 0
	})
	if n := st.entries.Load(); n > 2000 {
		t.Fatalf("one lookup miss listed %d entries; a relist stops after one page (1000)", n)
	}
	if _, err := os.Stat(filepath.Join(d, "o029999")); err != nil {
		t.Fatalf("another client's file past the first page: %v", err)
	}
}

// An interrupted lookup neither fails the others waiting for the same
// listing nor turns relisting off for the directory.
func TestInterruptedLookupKeepsRelisting(t *testing.T) {
	mem := memstore.New()
	st := &countingStore{Store: mem, gatePrefix: "d/", listing: make(chan struct{}, 1)}
	const ttl = 50 * time.Millisecond
	dir := mountFS(t, st, fusefs.Options{StatTTL: time.Hour, ListTTL: ttl})
	d := filepath.Join(dir, "d")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	// Stat missing names in another process until one, once the mkdir's
	// listing has expired, starts a listing (held at the gate); then kill
	// it, and the kernel interrupts its LOOKUP.
	g := make(chan struct{})
	st.gate.Store(&g)
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		cmd := exec.Command("stat", filepath.Join(d, fmt.Sprintf("missing-%d", i)))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		select {
		case <-st.listing:
			cmd.Process.Signal(syscall.SIGKILL)
			<-exited
		case <-exited: // answered from the listing: not expired yet
			if time.Now().After(deadline) {
				t.Fatal("no lookup miss listed the directory again")
			}
			continue
		}
		break
	}
	st.gate.Store(nil)
	close(g)
	st.heads.Store(0)
	st.lists.Store(0)
	start := time.Now()
	for i := range 5 {
		if _, err := os.Stat(filepath.Join(d, fmt.Sprintf("after-%d", i))); !os.IsNotExist(err) {
			t.Fatalf("stat after-%d: %v", i, err)
		}
	}
	// One listing, unless the stats outlasted it: a listing starts only
	// once the last is older than the TTL (see
	// TestConcurrentCreatesShareOneRelist).
	periods := int64(time.Since(start)/ttl) + 1
	if h, l := st.heads.Load(), st.lists.Load(); h != 0 || l > periods {
		t.Fatalf("after an interrupted lookup, 5 misses over %d TTLs sent %d HEADs and %d LISTs; want them answered from a listing per TTL", periods, h, l)
	}
}

// overlapStore tells whether a HEAD of a name under prefix and the
// LIST for a directory of that name were asked at once, in either order:
// while gated, such a HEAD waits (at most 10 s) for its LIST, which
// asked one after the other comes only after the HEAD's answer.
type overlapStore struct {
	countingStore
	prefix   string
	gated    atomic.Bool
	mu       sync.Mutex
	waiting  map[string]chan struct{} // HEADs waiting for their LIST
	listed   map[string]bool          // LISTs that came before their HEAD
	overlaps map[string]bool          // names asked both ways at once
}

func (s *overlapStore) Head(ctx context.Context, key string) (store.Object, error) {
	if s.gated.Load() && strings.HasPrefix(key, s.prefix) {
		s.mu.Lock()
		if s.listed[key] {
			s.overlaps[key] = true
			s.mu.Unlock()
		} else {
			listed := make(chan struct{})
			s.waiting[key] = listed
			s.mu.Unlock()
			select {
			case <-listed:
			case <-time.After(10 * time.Second): // asked one after the other
				s.mu.Lock()
				delete(s.waiting, key)
				s.mu.Unlock()
			}
		}
	}
	return s.countingStore.Head(ctx, key)
}

func (s *overlapStore) List(ctx context.Context, prefix, startAfter string, recursive bool) iter.Seq2[store.Entry, error] {
	name := strings.TrimSuffix(prefix, "/")
	if s.gated.Load() && strings.HasPrefix(name, s.prefix) {
		s.mu.Lock()
		if listed, ok := s.waiting[name]; ok {
			s.overlaps[name] = true
			close(listed)
			delete(s.waiting, name)
		} else {
			s.listed[name] = true
		}
		s.mu.Unlock()
	}
	return s.countingStore.List(ctx, prefix, startAfter, recursive)
}

// Creating files in a directory that is not relisted (never listed here,
// or too large; lookups that miss do not cluster) asks for each new name's file and directory at once after
// a few lookups found nothing, saving a round trip per create. The answers
// stay those of a HEAD first: a name that is both a file and a directory
// is the file. A name found ends the streak, and a stat of a file is one
// HEAD again.
func TestCreatesAskFileAndDirectoryAtOnce(t *testing.T) {
	mem := memstore.New()
	put(t, mem, "big/y", []byte("y"))
	put(t, mem, "big/nz", []byte("file nz"))
	put(t, mem, "big/nz/w", []byte("under nz/"))
	st := &overlapStore{countingStore: countingStore{Store: mem}, prefix: "big/n",
		waiting: map[string]chan struct{}{}, listed: map[string]bool{}, overlaps: map[string]bool{}}
	dir := mountFS(t, st, fusefs.Options{StatTTL: time.Hour, ListTTL: time.Hour})
	big := filepath.Join(dir, "big")
	if _, err := os.Stat(big); err != nil { // looked up, never listed
		t.Fatal(err)
	}
	name := func(i int) string { return fmt.Sprintf("n%03d", i) }
	create := func(i int) {
		if err := os.WriteFile(filepath.Join(big, name(i)), []byte("new"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i := range fusefs.NewNameStreak { // the streak that makes names count as new
		create(i)
	}
	st.gated.Store(true)
	const creates = 10
	for i := fusefs.NewNameStreak; i < fusefs.NewNameStreak+creates; i++ {
		create(i)
	}
	st.mu.Lock()
	for i := fusefs.NewNameStreak; i < fusefs.NewNameStreak+creates; i++ {
		if !st.overlaps["big/"+name(i)] {
			t.Errorf("the lookup of %s asked for file and directory one after the other", name(i))
		}
	}
	st.mu.Unlock()

	// Still in the streak: nz is a file and a directory; the file wins,
	// as it does for a HEAD first.
	fi, err := os.Stat(filepath.Join(big, "nz"))
	if err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("nz after the creates: %v, %v; want the file", fi, err)
	}
	st.gated.Store(false)
	st.heads.Store(0)
	st.lists.Store(0)
	if _, err := os.Stat(filepath.Join(big, "y")); err != nil {
		t.Fatal(err)
	}
	if h, l := st.heads.Load(), st.lists.Load(); h != 1 || l != 0 {
		t.Fatalf("stat of an existing file after the creates sent %d HEADs and %d LISTs, want 1 and 0", h, l)
	}
	for i := range fusefs.NewNameStreak + creates {
		if got := string(readFile(t, filepath.Join(big, name(i)))); got != "new" {
			t.Fatalf("%s reads %q", name(i), got)
		}
	}
}

// A StatTTL shorter than a lookup takes still finds the file: the lookup
// answers with the attributes it just read, instead of asking again for
// an inode not in the tree yet (which found nothing).
func TestLookupUnderAShortStatTTL(t *testing.T) {
	st := memstore.New()
	put(t, st, "f", []byte("x"))
	dir := mountFS(t, st, fusefs.Options{StatTTL: time.Nanosecond})
	if fi, err := os.Stat(filepath.Join(dir, "f")); err != nil || fi.Size() != 1 {
		t.Fatalf("stat: %v, %v", fi, err)
	}
}

// Lookups that cluster in a never-listed directory (a find, a stat of many
// siblings) list it once, up to the cluster limit, and the rest wait for
// that listing and answer from it, "no such file" included: a thousand
// stats of a directory of ten thousand cost clusterLookups HEADs and one
// listing, not a thousand HEADs. Isolated lookups cost one HEAD each; a directory past
// the limit is asked by name.
func TestClusteredLookupsListTheDirectoryOnce(t *testing.T) {
	mem := memstore.New()
	const files = 10_000
	for i := range files {
		put(t, mem, fmt.Sprintf("big/f%05d", i), []byte("x"))
	}
	for i := range 30 {
		put(t, mem, fmt.Sprintf("huge/f%05d", i), []byte("x"))
		put(t, mem, fmt.Sprintf("huge/g%05d", i), []byte("x"))
		put(t, mem, fmt.Sprintf("few/f%05d", i), []byte("x"))
	}
	st := &countingStore{Store: mem}
	f, dir := mountFSOf(t, st, fusefs.Options{StatTTL: time.Hour, ListTTL: time.Hour})
	fusefs.SetClusterLimit(f, 20) // huge's thirty are too many; the default is 20,000
	for _, d := range []string{"big", "huge", "few"} {
		if _, err := os.Stat(filepath.Join(dir, d)); err != nil {
			t.Fatal(err)
		}
	}
	// Isolated: two stats in another directory, a HEAD each.
	st.heads.Store(0)
	st.lists.Store(0)
	for _, name := range []string{"few/f00001", "few/f00002"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if h, l := st.heads.Load(), st.lists.Load(); h != 2 || l != 0 {
		t.Fatalf("two isolated stats sent %d HEADs and %d LISTs, want 2 and 0", h, l)
	}
	fusefs.SetClusterLimit(f, 20_000)
	st.heads.Store(0)
	st.lists.Store(0)
	st.entries.Store(0)
	rng := rand.New(rand.NewPCG(1, 2))
	perm := rng.Perm(files)[:1000]
	// The first lookups ask by name until they cluster (ClusterLookups
	// of them, more on a machine slow enough to spread them past the
	// cluster window); the one that finds they do starts the listing,
	// and it and every lookup after it wait for their names to come.
	fusefs.SetClusterWait(f, time.Hour) // however slowly the listing goes
	first := 0
	for ; !fusefs.HoldsListing(f, "big"); first++ {
		if first == len(perm) {
			t.Fatal("1,000 lookups did not cluster")
		}
		if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("big/f%05d", perm[first]))); err != nil {
			t.Fatal(err)
		}
	}
	for _, i := range perm[first:] {
		if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("big/f%05d", i))); err != nil {
			t.Fatal(err)
		}
	}
	first-- // the last of them waited for the listing it started
	if first < fusefs.ClusterLookups {
		t.Fatalf("lookups clustered after %d by name, want at least %d", first, fusefs.ClusterLookups)
	}
	for i := range 20 {
		if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("big/missing%d", i))); !os.IsNotExist(err) {
			t.Fatalf("stat of a missing name: %v", err)
		}
	}
	h, l, e := st.heads.Load(), st.lists.Load(), st.entries.Load()
	t.Logf("1,000 stats and 20 misses in a directory of %d: %d HEADs (%d lookups clustered), %d listings of %d entries", files, h, first, l, e)
	// The first lookups asked by name; the rest answered from the listing.
	if !fusefs.HoldsCompleteListing(f, "big") || h != int64(first) || l != 1 || e != files {
		t.Fatalf("1,000 stats and 20 misses sent %d HEADs and %d LISTs (%d entries); want %d HEADs and the directory listed once", h, l, e, first)
	}
	// Past the limit: by name, and never listed again.
	fusefs.SetClusterLimit(f, 20)
	st.heads.Store(0)
	st.lists.Store(0)
	for i := range 30 {
		if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("huge/f%05d", i))); err != nil {
			t.Fatal(err)
		}
	}
	// The listing answers the names it brought before it stopped (at
	// most the limit); the rest are asked by name.
	eventually(t, time.Minute, "the clustered listing of huge", func() bool { return st.lists.Load() == 1 && !fusefs.HoldsListing(f, "huge") })
	if h := st.heads.Load(); h < 30-20 {
		t.Fatalf("30 stats in a directory past the limit sent %d HEADs, want at least 10", h)
	}
	// Names not looked up yet (the kernel has the others), which
	// cluster as the first did.
	for i := range 30 {
		if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("huge/g%05d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if l := st.lists.Load(); l != 1 {
		t.Fatalf("a directory found past the limit was listed %d times, want once", l)
	}
}

// A clustered listing slower than clusterWait costs one lookup that
// wait; the lookups after it ask by name beside the listing, and answer
// from it once it has come. One that fails keeps lookups in its directory
// from clustering for clusterBackoff: each would wait for a listing again.
func TestSlowOrFailedClusteredListingsStopTheWaits(t *testing.T) {
	mem := memstore.New()
	for i := range 40 {
		put(t, mem, fmt.Sprintf("slow/f%03d", i), []byte("x"))
		put(t, mem, fmt.Sprintf("failing/f%03d", i), []byte("x"))
	}
	st := &countingStore{Store: mem, gatePrefix: "slow/", listing: make(chan struct{}, 1), failPrefix: "failing/"}
	f, dir := mountFSOf(t, st, fusefs.Options{StatTTL: time.Hour, ListTTL: time.Hour})
	for _, d := range []string{"slow", "failing"} {
		if _, err := os.Stat(filepath.Join(dir, d)); err != nil {
			t.Fatal(err)
		}
	}
	gate := make(chan struct{})
	st.gate.Store(&gate)
	defer close(gate)
	fusefs.SetClusterWait(f, 50*time.Millisecond)
	// stat fails the test unless name's lookup ends within a minute: a
	// lookup waiting for the held listing would not.
	stat := func(name string) {
		t.Helper()
		done := make(chan error, 1)
		go func() { _, err := os.Stat(filepath.Join(dir, name)); done <- err }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("the lookup of %s waited for a held listing", name)
		}
	}
	st.heads.Store(0)
	listed := false
	for i := range 20 {
		stat(fmt.Sprintf("slow/f%03d", i))
		select {
		case <-st.listing:
			// The lookup that started it waited in vain; from now on
			// no lookup waits: an hour's wait would fail stat.
			listed = true
			fusefs.SetClusterWait(f, time.Hour)
		default:
		}
	}
	if !listed {
		t.Fatal("lookups that clustered did not list the directory")
	}
	if h := st.heads.Load(); h != 20 {
		t.Fatalf("20 lookups beside a held listing sent %d HEADs, want 20", h)
	}

	st.heads.Store(0)
	st.lists.Store(0)
	st.failing.Store(true)
	for i := range 40 {
		stat(fmt.Sprintf("failing/f%03d", i))
	}
	// Clustered once (a LIST that failed, a wait of nothing), then by name.
	if h, l := st.heads.Load(), st.lists.Load(); l != 1 || h < 39 {
		t.Fatalf("40 lookups in a directory whose listing fails sent %d LISTs and %d HEADs, want one LIST and at least 39 HEADs", l, h)
	}
}

// A store whose listings carry no metadata (AWS S3, and most but MinIO)
// is not listed for lookups that cluster: each file would still need its
// HEAD. The first such listing stops, and lookups ask by name from then on.
func TestClusteringNeedsListingsWithMetadata(t *testing.T) {
	mem := memstore.New()
	for i := range 50 {
		put(t, mem, fmt.Sprintf("a/f%03d", i), []byte("x"))
		put(t, mem, fmt.Sprintf("b/f%03d", i), []byte("x"))
	}
	st := &countingStore{Store: bareListings{mem}}
	f, dir := mountFSOf(t, st, fusefs.Options{StatTTL: time.Hour, ListTTL: time.Hour})
	for _, d := range []string{"a", "b"} {
		if _, err := os.Stat(filepath.Join(dir, d)); err != nil {
			t.Fatal(err)
		}
	}
	st.heads.Store(0)
	st.lists.Store(0)
	for _, d := range []string{"a", "b"} {
		for i := range 10 {
			if _, err := os.Stat(filepath.Join(dir, d, fmt.Sprintf("f%03d", i))); err != nil {
				t.Fatal(err)
			}
		}
		// What the listing that finds out found out holds for lookups
		// after it, in the next directory.
		eventually(t, time.Minute, "the listing of "+d+" to end", func() bool { return !fusefs.Relisting(f, d) })
	}
	if h, l := st.heads.Load(), st.lists.Load(); h != 20 || l > 1 {
		t.Fatalf("20 stats over listings without metadata sent %d HEADs and %d LISTs, want 20 and at most the one that found out", h, l)
	}
}

// bareListings lists without objects' metadata, as AWS S3 does.
type bareListings struct{ store.Store }

func (s bareListings) List(ctx context.Context, prefix, startAfter string, recursive bool) iter.Seq2[store.Entry, error] {
	return func(yield func(store.Entry, error) bool) {
		for e, err := range s.Store.List(ctx, prefix, startAfter, recursive) {
			e.Object.Metadata = nil
			if !yield(e, err) {
				return
			}
		}
	}
}

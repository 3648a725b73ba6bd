package main

import (
	"bytes"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/objfuse/objfuse/fusefs/store"
	"github.com/objfuse/objfuse/fusefs/store/s3store"
	"github.com/objfuse/objfuse/test/miniotest"
	"github.com/objfuse/objfuse/test/seeds"
	"github.com/objfuse/objfuse/test/versitytest"
)

// TestTwoMountsShareABucket is the consistency contract under load: two
// objfuse-mount processes (two nodes) on one bucket and a plain S3 client
// run seeded random operations side by side, in phases. In each phase a
// shared file is either appended to (from both mounts: read-modify-writes
// that race) or replaced whole (from both mounts, by truncation, and by
// the S3 client); on mount A a writer replaces files in a directory that
// another goroutine of A keeps renaming; readers on both mounts and on S3
// read everything. Every write is a record that names itself, so a read
// that mixed two versions, or a byte of no version, cannot parse.
//
// Checked: every read returns whole records of writes that were made;
// after each phase, an appended file holds its starting content and then
// exactly the appends whose close returned 0, each once, and every
// append whose close failed is in a conflict copy; a replaced file holds
// one version whose write was acknowledged; each directory file holds
// its writer's last acknowledged version under the directory's current
// name, and nothing is left under the old one; once the stated delay
// (statTTL + listTTL) has passed, both mounts read what S3 holds.
//
// OBJFUSE_SHARED_SEEDS (e.g. "1-200") and OBJFUSE_SHARED_OPS (per seed)
// run longer searches; a failure names its server and seed.
func TestTwoMountsShareABucket(t *testing.T) {
	seedList, ops := sharedSettings(t)
	servers := []struct {
		name  string
		start func(t *testing.T) (s3store.Config, func(testing.TB) string)
		seeds []int64
	}{
		{"minio", func(t *testing.T) (s3store.Config, func(testing.TB) string) {
			srv := miniotest.Start(t)
			return srv.Config(), srv.NewBucket
		}, seedList},
		// The AWS-like server: conditional writes as AWS S3 has them.
		{"versitygw", func(t *testing.T) (s3store.Config, func(testing.TB) string) {
			srv, stop, err := versitytest.StartShared()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(stop)
			return srv.Config(), srv.NewBucket
		}, seedList[:max(1, len(seedList)/2)]},
	}
	for _, s := range servers {
		t.Run(s.name, func(t *testing.T) {
			cfg, newBucket := s.start(t)
			for _, seed := range s.seeds {
				t.Run("seed "+strconv.FormatInt(seed, 10), func(t *testing.T) {
					sh := newSharing(t, cfg, newBucket(t), seed)
					sh.renameEIO = s.name == "versitygw"
					sh.run(ops)
				})
			}
		})
	}
}

func sharedSettings(t *testing.T) ([]int64, int) {
	return seeds.FromEnv(t, "OBJFUSE_SHARED_SEEDS", []int64{1, 2}), seeds.CountFromEnv(t, "OBJFUSE_SHARED_OPS", 300)
}

const (
	sharedTTL   = 100 * time.Millisecond // each mount's statTTL and listTTL
	sharedFiles = 4                      // s0..s3
	bothWrite   = 2                      // s0, s1 are written through both mounts; s2, s3 through A
	phaseOps    = 60
)

// dirNames are the two names mount A's renamer moves the directory
// between.
var dirNames = [2]string{"d", "e"}

// sharing is one seed's run.
type sharing struct {
	t    *testing.T
	seed int64
	s3   store.Store // the plain S3 client
	a, b string      // the two mountpoints

	mu     sync.Mutex
	issued map[string]bool // every record tag written or attempted
	// anomalies counts the reads reader does not fail that were not
	// whole records of one write; whole and stale count the reads it
	// holds to being whole, and the ESTALEs among all.
	anomalies, whole, stale atomic.Int64
	// renameEIO: a read of a file in the directory being renamed may
	// fail with EIO (versitygw: README); such reads are counted in eio.
	renameEIO bool
	eio       atomic.Int64
	dir       atomic.Int32 // index in dirNames of the directory's name
	renames   atomic.Int64 // odd while the directory is being renamed
	counter   atomic.Int64
}

func newSharing(t *testing.T, cfg s3store.Config, bucket string, seed int64) *sharing {
	st, err := s3store.New(cfg, bucket)
	if err != nil {
		t.Fatal(err)
	}
	s := &sharing{t: t, seed: seed, s3: st, issued: map[string]bool{}}
	s.a = startMount(t, cfg, bucket, "a")
	s.b = startMount(t, cfg, bucket, "b")
	return s
}

// startMount runs objfuse-mount in the foreground with short TTLs and
// stops it when the test ends; a data race it reports fails the test.
func startMount(t *testing.T, cfg s3store.Config, source, name string) string {
	t.Helper()
	mnt := t.TempDir()
	logPath := filepath.Join(t.TempDir(), name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, "--foreground", "--endpoint", cfg.Endpoint, "--path-style",
		"--region", cfg.Region, "--credentials-dir", cfg.CredentialsDir,
		"--stat-ttl", sharedTTL.String(), "--list-ttl", sharedTTL.String(),
		"--staging-dir", t.TempDir(), source, mnt)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		err := cmd.Wait()
		logFile.Close()
		log, _ := os.ReadFile(logPath)
		switch {
		case bytes.Contains(log, []byte("DATA RACE")) || err != nil:
			t.Errorf("mount %s exited with %v:\n%s", name, err, log)
		case t.Failed():
			t.Logf("mount %s logged:\n%s", name, lastLines(log, 40))
		}
		syscall.Unmount(mnt, syscall.MNT_DETACH)
	})
	waitFor(t, "mount "+name, func() bool { return mounted(mnt) })
	return mnt
}

// A record is one write: "<tag n>" then n bytes only that tag makes,
// then a newline.
func (s *sharing) record(writer string, n int) (string, []byte) {
	tag := fmt.Sprintf("%s.%d", writer, s.counter.Add(1))
	s.mu.Lock()
	s.issued[tag] = true
	s.mu.Unlock()
	var b bytes.Buffer
	fmt.Fprintf(&b, "<%s %d>", tag, n)
	b.Write(payload(tag, n))
	b.WriteByte('\n')
	return tag, b.Bytes()
}

func payload(tag string, n int) []byte {
	h := fnv.New64a()
	h.Write([]byte(tag))
	r := rand.New(rand.NewPCG(h.Sum64(), 0))
	p := make([]byte, n)
	for i := range p {
		p[i] = 'a' + byte(r.IntN(26))
	}
	return p
}

// records parses content into the tags of its records; an error says
// where it stops being whole records.
func records(content []byte) ([]string, error) {
	var tags []string
	for off := 0; off < len(content); {
		rest := content[off:]
		end := bytes.IndexByte(rest, '>')
		if rest[0] != '<' || end < 0 {
			return tags, fmt.Errorf("no record header at %d: %.24q (after %v)", off, rest, tags)
		}
		tag, size, ok := strings.Cut(string(rest[1:end]), " ")
		n, err := strconv.Atoi(size)
		if !ok || err != nil || n < 0 {
			return tags, fmt.Errorf("bad record header %.40q at %d", rest[:end+1], off)
		}
		if end+1+n+1 > len(rest) {
			if bytes.HasPrefix(payload(tag, n), rest[end+1:]) {
				return tags, fmt.Errorf("record %s at %d ends after %d of its %d bytes", tag, off, len(rest)-end-1, n)
			}
			return tags, fmt.Errorf("record %s at %d is cut short after %d bytes and holds bytes of another %s", tag, off, len(rest)-end-1, mismatch(rest[end+1:], payload(tag, n)))
		}
		if !bytes.Equal(rest[end+1:end+1+n], payload(tag, n)) || rest[end+1+n] != '\n' {
			return tags, fmt.Errorf("record %s at %d holds bytes of another %s", tag, off, mismatch(rest[end+1:], payload(tag, n)))
		}
		tags = append(tags, tag)
		off += end + 1 + n + 1
	}
	return tags, nil
}

// checkRead fails the test unless content read from where is whole
// records of writes that were made.
func (s *sharing) checkRead(where string, content []byte) {
	tags, err := records(content)
	if err != nil {
		s.t.Errorf("seed %d: %s read %d bytes that are not whole records: %v", s.seed, where, len(content), err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, tag := range tags {
		if !s.issued[tag] {
			s.t.Errorf("seed %d: %s read record %s, which nobody wrote", s.seed, where, tag)
		}
	}
}

func sharedName(i int) string { return "s" + strconv.Itoa(i) }

// phase is what one phase did to the shared files.
type phase struct {
	mu      sync.Mutex
	appends [sharedFiles]bool     // appended to (else replaced)
	base    [sharedFiles][]string // the records each held at the start
	acked   [sharedFiles][]string // writes whose close (or PUT) succeeded; "" is an empty version
	failed  [sharedFiles][]string // appends whose close failed
	dirLast [2]string             // the directory writer's last acknowledged version of f0, f1
}

func (p *phase) note(list *[sharedFiles][]string, i int, tag string) {
	p.mu.Lock()
	list[i] = append(list[i], tag)
	p.mu.Unlock()
}

func (s *sharing) run(ops int) {
	ctx := s.t.Context()
	// Every shared file exists before the first phase: an append to a
	// file that does not exist creates it, which is last-writer-wins.
	for i := range sharedFiles {
		_, rec := s.record("init", 10)
		if _, err := s.s3.Put(ctx, sharedName(i), bytes.NewReader(rec), int64(len(rec)), nil); err != nil {
			s.t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(s.a, dirNames[0]), 0o755); err != nil {
		s.t.Fatal(err)
	}
	var dirLast [2]string
	for n := 0; n*phaseOps < ops && !s.t.Failed(); n++ {
		r := rand.New(rand.NewPCG(uint64(s.seed), uint64(n)))
		p := &phase{dirLast: dirLast}
		for i := range sharedFiles {
			p.appends[i] = r.IntN(2) == 0
			p.base[i] = s.storedRecords(sharedName(i))
		}
		s.runPhase(p, r.Uint64(), min(phaseOps, ops-n*phaseOps))
		s.checkPhase(p)
		dirLast = p.dirLast
	}
	// ESTALE is for a file replaced under its reader: a mount that gave
	// it to most reads would pass every check above and serve no one.
	if whole, stale := s.whole.Load(), s.stale.Load(); stale > whole {
		s.t.Errorf("seed %d: %d reads failed with ESTALE, %d strict ones succeeded", s.seed, stale, whole)
	}
	if n := s.eio.Load(); n > 0 {
		s.t.Logf("seed %d: %d read(s) of a file in the renamed directory failed with EIO (known limit on versitygw: README)", s.seed, n)
	}
	if n := s.anomalies.Load(); n > 0 {
		s.t.Logf("seed %d: %d read(s) of a file the same mount was writing were not whole records (as on a local filesystem: README)", s.seed, n)
	}
}

// runPhase runs ops operations spread over the workers, side by side.
func (s *sharing) runPhase(p *phase, seed uint64, ops int) {
	workers := []func(r *rand.Rand){
		func(r *rand.Rand) { s.mountWriter(p, r, "A", s.a) },
		func(r *rand.Rand) { s.mountWriter(p, r, "B", s.b) },
		func(r *rand.Rand) { s.s3Writer(p, r) },
		func(r *rand.Rand) { s.dirWriter(p, r) },
		func(r *rand.Rand) { s.dirRenamer(r) },
		func(r *rand.Rand) { s.reader(r, "A", s.a) },
		func(r *rand.Rand) { s.reader(r, "B", s.b) },
	}
	var wg sync.WaitGroup
	for w, work := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(seed, uint64(w)))
			for range max(1, ops/len(workers)) {
				work(r)
			}
		})
	}
	wg.Wait()
}

func recordSize(r *rand.Rand) int {
	if r.IntN(10) == 0 {
		return r.IntN(3 << 20) // across parts and readahead
	}
	return r.IntN(4096)
}

// mountWriter appends to or replaces a shared file through a mount.
func (s *sharing) mountWriter(p *phase, r *rand.Rand, who, mnt string) {
	i := r.IntN(sharedFiles)
	if who == "B" {
		i = r.IntN(bothWrite)
	}
	path := filepath.Join(mnt, sharedName(i))
	switch {
	case p.appends[i]:
		tag, rec := s.record(who, r.IntN(512))
		if err := appendFile(path, rec); err != nil {
			if errors.Is(err, syscall.ESTALE) {
				return // refused at write(): nothing to keep
			}
			if !errors.Is(err, syscall.EIO) {
				s.t.Errorf("seed %d: append %s to %s on %s: %v", s.seed, tag, sharedName(i), who, err)
			}
			p.note(&p.failed, i, tag)
			return
		}
		p.note(&p.acked, i, tag)
	case r.IntN(5) == 0:
		if err := os.Truncate(path, 0); err != nil {
			s.t.Errorf("seed %d: truncate %s on %s: %v", s.seed, sharedName(i), who, err)
			return
		}
		p.note(&p.acked, i, "")
	default:
		tag, rec := s.record(who, recordSize(r))
		if err := os.WriteFile(path, rec, 0o644); err != nil {
			s.t.Errorf("seed %d: write %s to %s on %s: %v", s.seed, tag, sharedName(i), who, err)
			return
		}
		p.note(&p.acked, i, tag)
	}
}

func appendFile(path string, rec []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	if _, err := f.Write(rec); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// s3Writer replaces shared files that are not being appended to, and
// reads any, as a plain S3 client.
func (s *sharing) s3Writer(p *phase, r *rand.Rand) {
	i := r.IntN(sharedFiles)
	if p.appends[i] || r.IntN(2) == 0 {
		body, err := s.s3.Get(s.t.Context(), sharedName(i), store.AnyVersion, 0, -1)
		if err != nil {
			s.t.Errorf("seed %d: S3 get %s: %v", s.seed, sharedName(i), err)
			return
		}
		content, err := io.ReadAll(body)
		body.Close()
		if err == nil {
			s.checkRead("S3 "+sharedName(i), content)
		}
		return
	}
	tag, rec := s.record("S3", recordSize(r))
	if _, err := s.s3.Put(s.t.Context(), sharedName(i), bytes.NewReader(rec), int64(len(rec)), nil); err != nil {
		s.t.Errorf("seed %d: S3 put %s: %v", s.seed, tag, err)
		return
	}
	p.note(&p.acked, i, tag)
}

// dirWriter replaces f0 or f1 in the directory mount A's renamer moves.
// An open that finds the directory gone while a rename ran tries again,
// under the name the renamer gives it now (a directory's rename copies
// and deletes object by object: while it runs, the old name can be gone
// before the new one is there). One that finds it gone with no rename
// running fails the test.
func (s *sharing) dirWriter(p *phase, r *rand.Rand) {
	f := r.IntN(2)
	tag, rec := s.record("D", recordSize(r))
	deadline := time.Now().Add(time.Minute)
	for {
		renames := s.renames.Load()
		name := dirNames[s.dir.Load()]
		err := os.WriteFile(filepath.Join(s.a, name, "f"+strconv.Itoa(f)), rec, 0o644)
		if err == nil {
			p.mu.Lock()
			p.dirLast[f] = tag
			p.mu.Unlock()
			return
		}
		renamed := renames%2 == 1 || s.renames.Load() != renames
		if !errors.Is(err, fs.ErrNotExist) || !renamed || time.Now().After(deadline) {
			s.t.Errorf("seed %d: write %s to %s/f%d (a rename ran meanwhile: %v): %v", s.seed, tag, name, f, renamed, err)
			return
		}
		if s.renames.Load()%2 == 1 {
			<-time.After(sharedTTL / 10) // poll until the rename ends
		}
	}
}

// dirRenamer moves the directory to its other name, now and then.
// renames is odd while it does.
func (s *sharing) dirRenamer(r *rand.Rand) {
	if r.IntN(4) != 0 {
		return
	}
	s.renames.Add(1)
	defer s.renames.Add(1)
	from := s.dir.Load()
	if err := os.Rename(filepath.Join(s.a, dirNames[from]), filepath.Join(s.a, dirNames[1-from])); err != nil {
		s.t.Errorf("seed %d: rename %s to %s: %v", s.seed, dirNames[from], dirNames[1-from], err)
		return
	}
	s.dir.Store(1 - from)
}

// reader reads a shared or directory file through a mount. A read of a
// file the same mount is writing at the time is as on a local filesystem:
// it may see part of each version, which the consistency contract does
// not promise otherwise (README); such reads are counted (anomalies),
// not failed. Every other read must be one whole version: of files the
// other mount and the S3 client replace and append to, and of files in
// the directory the other mount writes and renames.
func (s *sharing) reader(r *rand.Rand, who, mnt string) {
	i := r.IntN(sharedFiles)
	name := sharedName(i)
	lenient := who == "A" || i < bothWrite
	if r.IntN(4) == 0 {
		name = dirNames[s.dir.Load()] + "/f" + strconv.Itoa(r.IntN(2))
		lenient = who == "A"
	}
	content, err := os.ReadFile(filepath.Join(mnt, name))
	switch {
	case errors.Is(err, syscall.ESTALE):
		s.stale.Add(1) // replaced under the reader: told, not mixed
	case errors.Is(err, fs.ErrNotExist) && strings.Contains(name, "/"):
		// the directory moved away under the reader
	case errors.Is(err, syscall.EIO) && strings.Contains(name, "/") && s.renameEIO:
		s.eio.Add(1) // an error, not bytes of no version: a known limit
	case err != nil:
		s.t.Errorf("seed %d: read %s on %s: %v", s.seed, name, who, err)
	case lenient:
		if _, err := records(content); err != nil {
			if s.anomalies.Add(1) <= 3 {
				s.t.Logf("seed %d: a read of %s on %s, which that mount was writing, returned %d bytes: %v", s.seed, name, who, len(content), err)
			}
		}
	default:
		s.whole.Add(1)
		s.checkRead(who+" "+name, content)
	}
}

// storedRecords are the records S3 holds under name (none if absent).
func (s *sharing) storedRecords(name string) []string {
	content, ok := s.stored(name)
	if !ok {
		return nil
	}
	tags, err := records(content)
	if err != nil {
		s.t.Errorf("seed %d: S3 holds %s that is not whole records: %v", s.seed, name, err)
	}
	return tags
}

func (s *sharing) stored(name string) ([]byte, bool) {
	body, err := s.s3.Get(s.t.Context(), name, store.AnyVersion, 0, -1)
	if errors.Is(err, store.ErrNotExist) {
		return nil, false
	}
	if err != nil {
		s.t.Fatalf("seed %d: get %s: %v", s.seed, name, err)
	}
	defer body.Close()
	content, err := io.ReadAll(body)
	if err != nil {
		s.t.Fatalf("seed %d: get %s: %v", s.seed, name, err)
	}
	return content, true
}

// checkPhase checks what S3 holds once a phase's operations have ended,
// then that both mounts read it once the stated delay has passed.
func (s *sharing) checkPhase(p *phase) {
	ctx := s.t.Context()
	var keys []string
	for e, err := range s.s3.List(ctx, "", "", true) {
		if err != nil {
			s.t.Fatal(err)
		}
		keys = append(keys, e.Key)
	}
	for i := range sharedFiles {
		name := sharedName(i)
		final := s.storedRecords(name)
		if p.appends[i] {
			s.checkAppended(p, i, final, keys)
			continue
		}
		want := p.acked[i]
		if len(want) == 0 {
			if !slices.Equal(final, p.base[i]) {
				s.t.Errorf("seed %d: %s holds %v; nothing replaced %v", s.seed, name, final, p.base[i])
			}
			continue
		}
		if len(final) > 1 || !slices.Contains(want, strings.Join(final, "")) {
			s.t.Errorf("seed %d: %s holds %v, not one acknowledged version of %q", s.seed, name, final, want)
		}
	}
	cur := dirNames[s.dir.Load()]
	for f, tag := range p.dirLast {
		if tag == "" {
			continue
		}
		name := cur + "/f" + strconv.Itoa(f)
		if got := s.storedRecords(name); !slices.Equal(got, []string{tag}) {
			s.t.Errorf("seed %d: %s holds %v after the renames; the last acknowledged write was %s", s.seed, name, got, tag)
		}
	}
	for _, k := range keys {
		if strings.HasPrefix(k, dirNames[1-s.dir.Load()]+"/") {
			s.t.Errorf("seed %d: %s is left under the directory's old name", s.seed, k)
		}
	}
	// Conflict copies are checked: remove them, so that the next phase
	// finds only its own.
	for _, k := range keys {
		if strings.Contains(k, ".objfuse-conflict-") {
			if err := s.s3.Delete(ctx, k); err != nil {
				s.t.Fatal(err)
			}
		}
	}
	waitPast(time.Now().Add(2 * sharedTTL))
	for _, mnt := range []struct{ who, dir string }{{"A", s.a}, {"B", s.b}} {
		for i := range sharedFiles {
			want, _ := s.stored(sharedName(i))
			got, err := os.ReadFile(filepath.Join(mnt.dir, sharedName(i)))
			if err != nil || !bytes.Equal(got, want) {
				g, _ := records(got)
				w, _ := records(want)
				s.t.Errorf("seed %d: %s reads %s as %v (%v) %v after the phase; S3 holds %v", s.seed, mnt.who, sharedName(i), g, err, 2*sharedTTL, w)
			}
		}
	}
}

// checkAppended: an appended file holds its starting records, then each
// acknowledged append once; each failed one is in a conflict copy.
func (s *sharing) checkAppended(p *phase, i int, final, keys []string) {
	name := sharedName(i)
	base, acked := p.base[i], p.acked[i]
	if len(final) < len(base) || !slices.Equal(final[:len(base)], base) {
		s.t.Errorf("seed %d: %s holds %v, which lost its starting records %v", s.seed, name, final, base)
		return
	}
	added := slices.Clone(final[len(base):])
	slices.Sort(added)
	want := slices.Clone(acked)
	slices.Sort(want)
	if !slices.Equal(added, want) {
		s.t.Errorf("seed %d: %s gained %v; the acknowledged appends were %v (failed: %v)", s.seed, name, final[len(base):], acked, p.failed[i])
	}
	for _, tag := range p.failed[i] {
		kept := false
		for _, k := range keys {
			if strings.HasPrefix(k, name+".objfuse-conflict-") && slices.Contains(s.storedRecords(k), tag) {
				kept = true
				break
			}
		}
		if !kept {
			s.t.Errorf("seed %d: the append %s to %s failed and is in no conflict copy", s.seed, tag, name)
		}
	}
}

// waitPast waits until t has passed. The bound under test is a time:
// there is nothing to poll for before it.
func waitPast(t time.Time) { <-time.After(time.Until(t) + time.Millisecond) }

func lastLines(b []byte, n int) []byte {
	lines := bytes.SplitAfter(b, []byte("\n"))
	return bytes.Join(lines[max(0, len(lines)-n):], nil)
}

// mismatch says where got first differs from want, and how.
func mismatch(got, want []byte) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	return fmt.Sprintf("from its byte %d: %.24q", i, got[i:])
}

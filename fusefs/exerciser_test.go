package fusefs_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/objfuse/objfuse/fusefs"
	"github.com/objfuse/objfuse/fusefs/store"
	"github.com/objfuse/objfuse/test/seeds"
)

// TestRandomOpsMatchALocalFilesystem is a differential exerciser, in the
// spirit of fsx: seeded random sequences of open, write (at random
// offsets and continuing at the end, small and across parts), read,
// fsync, truncate, rename, unlink and close run on a mount and on a local
// directory at once, and every result must match: the bytes read, the
// sizes, the errors. Whenever a file has no open handle left (and after
// an fsync), what S3 holds must be what the local file holds; at the end a
// fresh mount of the same bucket must show the same tree.
//
// OBJFUSE_EXERCISE_SEEDS (e.g. "1-200") and OBJFUSE_EXERCISE_OPS run
// longer searches; a failure names its seed and the ops that led to it.
func TestRandomOpsMatchALocalFilesystem(t *testing.T) {
	seedList, ops := exerciseSettings(t)
	modes := []struct {
		name string
		opts fusefs.Options
	}{
		{"durable", fusefs.Options{}},
		{"async close", fusefs.Options{AsyncClose: true}},
		{"prefix", fusefs.Options{Prefix: "vol/"}}, // a volume in a shared bucket
	}
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			for _, m := range modes {
				t.Run(m.name, func(t *testing.T) {
					for _, seed := range seedList {
						t.Run("seed "+strconv.FormatInt(seed, 10), func(t *testing.T) {
							st := b.fresh(t)
							newExerciser(t, st, m.opts, seed, mountFS(t, st, m.opts), "", nil).run(ops)
						})
					}
				})
			}
		})
	}
}

func exerciseSettings(t *testing.T) ([]int64, int) {
	return seeds.FromEnv(t, "OBJFUSE_EXERCISE_SEEDS", []int64{1, 2, 3}), seeds.CountFromEnv(t, "OBJFUSE_EXERCISE_OPS", 150)
}

// exerciseNames are the files the exerciser plays with: few enough that
// opens, renames and unlinks keep meeting each other.
var exerciseNames = []string{"a", "b", "d/c", "d/e", "f/c", "f/e"}

// exerciseDirs are the directories they may be in; "d" exists at first.
var exerciseDirs = []string{"d", "f"}

const (
	maxOpenHandles = 6
	smallWrite     = 64 << 10
	largeWrite     = 6 << 20 // more than the tests' 5 MiB part
)

// twin is one open file, on both sides.
type twin struct {
	ref, fs *os.File
	name    string // where it is linked now; "" once unlinked or replaced
	append  bool
	rw      bool // opened O_RDWR: mmap can write through it
	id      int
}

type exerciser struct {
	t         *testing.T
	st        store.Store
	opts      fusefs.Options
	rng       *rand.Rand
	seed      int64
	ref, mnt  string
	sub       string   // the directory of the mount played in, or ""
	siblings  []string // other exercisers' directories in the same mount
	keyPrefix string   // the keys of the names played with start so
	handles   []*twin
	nextID    int
	trace     []string
	storeWait time.Duration // how long an async close may take to reach S3
	// paranoid compares every open handle's whole content after each op,
	// to find the first op where the two sides part.
	paranoid bool
}

// TestConcurrentExercisersShareAMount runs several exercisers at once on
// one mount, each in a directory of its own: the filesystem's shared
// parts (the root's listing, memory for uploads, the kernel's requests in
// parallel) under load, every one still checked against its local twin.
// With -race, as CI runs it, it also looks for data races.
func TestConcurrentExercisersShareAMount(t *testing.T) {
	seedList, ops := exerciseSettings(t)
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			for _, opts := range []fusefs.Options{{}, {AsyncClose: true}} {
				t.Run(fmt.Sprintf("async close %v", opts.AsyncClose), func(t *testing.T) {
					st := b.fresh(t)
					mnt := mountFS(t, st, opts)
					var subs []string
					for i := range seedList {
						subs = append(subs, fmt.Sprintf("w%d", i))
					}
					for i, seed := range seedList {
						t.Run(subs[i], func(t *testing.T) {
							t.Parallel()
							newExerciser(t, st, opts, seed, mnt, subs[i], subs).run(ops)
						})
					}
				})
			}
		})
	}
}

// newExerciser plays in sub (the mount's root when "") of the mount at
// mnt; siblings are the directories other exercisers play in at once.
func newExerciser(t *testing.T, st store.Store, opts fusefs.Options, seed int64, mnt, sub string, siblings []string) *exerciser {
	x := &exerciser{t: t, st: st, opts: opts, rng: rand.New(rand.NewSource(seed)), seed: seed,
		ref: t.TempDir(), mnt: filepath.Join(mnt, sub), sub: sub, siblings: siblings, keyPrefix: opts.Prefix}
	if sub != "" {
		x.keyPrefix += sub + "/"
		if err := os.Mkdir(x.mnt, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if opts.AsyncClose {
		x.storeWait = 20 * time.Second
	}
	x.paranoid = os.Getenv("OBJFUSE_EXERCISE_PARANOID") != ""
	for _, root := range []string{x.ref, x.mnt} {
		if err := os.Mkdir(filepath.Join(root, "d"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Handles must be closed before the mount's cleanup unmounts it.
	t.Cleanup(func() {
		for _, h := range x.handles {
			h.ref.Close()
			h.fs.Close()
		}
	})
	return x
}

// fail reports a mismatch with the seed and the latest ops, and stops.
func (x *exerciser) fail(format string, args ...any) {
	x.t.Helper()
	from := max(0, len(x.trace)-400)
	x.t.Fatalf("seed %d, op %d: %s\n%s\nlast ops:\n  %s", x.seed, len(x.trace), fmt.Sprintf(format, args...),
		x.s3View(), strings.Join(x.trace[from:], "\n  "))
}

func (x *exerciser) note(format string, args ...any) {
	x.trace = append(x.trace, fmt.Sprintf("%d: ", len(x.trace)+1)+fmt.Sprintf(format, args...))
}

func (x *exerciser) run(ops int) {
	type op struct {
		weight int
		do     func()
	}
	table := []op{
		{12, x.open}, {30, x.write}, {15, x.read}, {10, x.close}, {5, x.fsync},
		{5, x.ftruncate}, {4, x.truncate}, {6, x.stat}, {5, x.rename}, {4, x.unlink},
		{4, x.readWhole}, {4, x.mmapWrite}, {2, x.chmod}, {2, x.fchmod}, {2, x.list},
		{2, x.mkdir}, {2, x.rmdir}, {2, x.renameDir},
	}
	total := 0
	for _, o := range table {
		total += o.weight
	}
	for i := 0; i < ops; i++ {
		n := x.rng.Intn(total)
		for _, o := range table {
			if n < o.weight {
				o.do()
				break
			}
			n -= o.weight
		}
		if x.paranoid {
			x.compareHandles()
		}
	}
	for len(x.handles) > 0 {
		x.closeHandle(0)
	}
	x.t.Logf("seed %d: %s", x.seed, x.opMix())
	x.compareTree(x.mnt, "the mount")
	// A fresh filesystem over the same bucket: what was stored, not what
	// the first mount remembers.
	x.compareTree(filepath.Join(mountFS(x.t, x.st, x.opts), x.sub), "a fresh mount")
}

// s3View is what S3 holds for the exerciser, listed whole and by
// directory as the mount lists it, for a failure's report.
func (x *exerciser) s3View() string {
	ctx := context.Background()
	var b strings.Builder
	for _, dir := range append([]string{""}, exerciseDirs...) {
		prefix, recursive := x.keyPrefix, dir == ""
		if dir != "" {
			prefix += dir + "/"
		}
		fmt.Fprintf(&b, "S3 under %q (recursive %v):", prefix, recursive)
		for e, err := range x.st.List(ctx, prefix, "", recursive) {
			switch {
			case err != nil:
				fmt.Fprintf(&b, " error %v", err)
			case e.IsPrefix():
				fmt.Fprintf(&b, " %s", e.Prefix)
			default:
				fmt.Fprintf(&b, " %s(%d)", e.Key, e.Size)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// opMix counts the ops run by their first word, to show what a seed did.
func (x *exerciser) opMix() string {
	counts := map[string]int{}
	for _, line := range x.trace {
		_, op, _ := strings.Cut(line, ": ")
		if word, _, _ := strings.Cut(strings.TrimSpace(op), " "); word != "=" {
			counts[word]++
		}
	}
	var parts []string
	for _, op := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s %d", op, counts[op]))
	}
	return strings.Join(parts, ", ")
}

// onBoth runs op on the local directory and on the mount, fails unless
// both ended alike, and returns how they ended.
func (x *exerciser) onBoth(what string, op func(root string) error) error {
	x.t.Helper()
	errRef, errFS := op(x.ref), op(x.mnt)
	if !sameErr(errRef, errFS) {
		x.fail("%s: local %v, mount %v", what, errRef, errFS)
	}
	return errRef
}

// sameErr: both sides failed the same way, or neither did.
func sameErr(a, b error) bool {
	return errKind(a) == errKind(b)
}

func errKind(err error) string {
	var errno syscall.Errno
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, io.EOF):
		return "EOF"
	case errors.As(err, &errno):
		return errno.Error()
	}
	return err.Error()
}

func (x *exerciser) pickName() string { return exerciseNames[x.rng.Intn(len(exerciseNames))] }

func (x *exerciser) pickHandle() (int, *twin) {
	if len(x.handles) == 0 {
		return -1, nil
	}
	i := x.rng.Intn(len(x.handles))
	return i, x.handles[i]
}

func (x *exerciser) open() {
	if len(x.handles) >= maxOpenHandles {
		x.close()
		return
	}
	flagSets := []struct {
		what  string
		flags int
	}{
		{"O_RDWR", os.O_RDWR},
		{"O_RDWR|O_CREAT", os.O_RDWR | os.O_CREATE},
		{"O_WRONLY|O_CREAT|O_TRUNC", os.O_WRONLY | os.O_CREATE | os.O_TRUNC},
		{"O_RDWR|O_CREAT|O_TRUNC", os.O_RDWR | os.O_CREATE | os.O_TRUNC},
		{"O_WRONLY|O_CREAT|O_APPEND", os.O_WRONLY | os.O_CREATE | os.O_APPEND},
		{"O_RDONLY", os.O_RDONLY},
		{"O_RDWR|O_CREAT|O_EXCL", os.O_RDWR | os.O_CREATE | os.O_EXCL},
	}
	f := flagSets[x.rng.Intn(len(flagSets))]
	name := x.pickName()
	x.note("open %s %s", name, f.what)
	ref, errRef := os.OpenFile(filepath.Join(x.ref, name), f.flags, 0o644)
	fsf, errFS := os.OpenFile(filepath.Join(x.mnt, name), f.flags, 0o644)
	if !sameErr(errRef, errFS) {
		x.fail("open %s %s: local %v, mount %v", name, f.what, errRef, errFS)
	}
	if errRef != nil {
		return
	}
	x.nextID++
	x.handles = append(x.handles, &twin{ref: ref, fs: fsf, name: name, append: f.flags&os.O_APPEND != 0,
		rw: f.flags&(os.O_RDWR|os.O_WRONLY|os.O_RDONLY) == os.O_RDWR, id: x.nextID})
	x.note("  = handle %d", x.nextID)
}

// size is the local file's size through the handle.
func (x *exerciser) size(h *twin) int64 {
	fi, err := h.ref.Stat()
	if err != nil {
		x.fail("fstat local handle %d: %v", h.id, err)
	}
	return fi.Size()
}

func (x *exerciser) write() {
	_, h := x.pickHandle()
	if h == nil {
		x.open()
		return
	}
	size := x.size(h)
	n := 1 + x.rng.Intn(smallWrite)
	if x.rng.Intn(12) == 0 {
		n = 1 + x.rng.Intn(largeWrite)
	}
	off := size // most writes continue the file, as most programs write
	switch x.rng.Intn(4) {
	case 0:
		off = x.rng.Int63n(size + 1)
	case 1:
		off = size + x.rng.Int63n(smallWrite) // a hole
	}
	data := make([]byte, n)
	x.rng.Read(data)
	var nRef, nFS int
	var errRef, errFS error
	if h.append {
		x.note("append %d bytes to handle %d (%s)", n, h.id, h.name)
		nRef, errRef = h.ref.Write(data)
		nFS, errFS = h.fs.Write(data)
	} else {
		x.note("write %d bytes at %d to handle %d (%s)", n, off, h.id, h.name)
		nRef, errRef = h.ref.WriteAt(data, off)
		nFS, errFS = h.fs.WriteAt(data, off)
	}
	if nRef != nFS || !sameErr(errRef, errFS) {
		x.fail("write to handle %d: local %d, %v; mount %d, %v", h.id, nRef, errRef, nFS, errFS)
	}
}

func (x *exerciser) read() {
	_, h := x.pickHandle()
	if h == nil {
		x.open()
		return
	}
	size := x.size(h)
	off := x.rng.Int63n(size + 2)
	n := 1 + x.rng.Intn(smallWrite)
	if x.rng.Intn(10) == 0 {
		n = 1 + x.rng.Intn(largeWrite)
	}
	x.note("read %d bytes at %d from handle %d (%s)", n, off, h.id, h.name)
	a, b := make([]byte, n), make([]byte, n)
	nRef, errRef := h.ref.ReadAt(a, off)
	nFS, errFS := h.fs.ReadAt(b, off)
	if nRef != nFS || !sameErr(errRef, errFS) {
		x.fail("read handle %d: local %d, %v; mount %d, %v", h.id, nRef, errRef, nFS, errFS)
	}
	if !bytes.Equal(a[:nRef], b[:nFS]) {
		x.fail("read handle %d at %d: bytes differ from offset %d", h.id, off, off+int64(firstDiff(a, b)))
	}
}

func (x *exerciser) close() {
	i, h := x.pickHandle()
	if h == nil {
		x.open()
		return
	}
	x.closeHandle(i)
}

func (x *exerciser) closeHandle(i int) {
	h := x.handles[i]
	x.note("close handle %d (%s)", h.id, h.name)
	x.handles = slices.Delete(x.handles, i, i+1)
	errRef, errFS := h.ref.Close(), h.fs.Close()
	if !sameErr(errRef, errFS) {
		x.fail("close handle %d: local %v, mount %v", h.id, errRef, errFS)
	}
	if h.name != "" && !x.isOpen(h.name) {
		x.checkStored(h.name, "after the last close")
	}
}

func (x *exerciser) isOpen(name string) bool {
	return slices.ContainsFunc(x.handles, func(h *twin) bool { return h.name == name })
}

func (x *exerciser) fsync() {
	_, h := x.pickHandle()
	if h == nil {
		return
	}
	x.note("fsync handle %d (%s)", h.id, h.name)
	errRef, errFS := h.ref.Sync(), h.fs.Sync()
	if !sameErr(errRef, errFS) {
		x.fail("fsync handle %d: local %v, mount %v", h.id, errRef, errFS)
	}
	if h.name != "" && errFS == nil {
		x.checkStoredNow(h.name, "after fsync")
	}
}

func (x *exerciser) newSize(size int64) int64 {
	switch x.rng.Intn(3) {
	case 0:
		return 0
	case 1:
		return x.rng.Int63n(size + 1)
	}
	return size + x.rng.Int63n(2*smallWrite)
}

func (x *exerciser) ftruncate() {
	_, h := x.pickHandle()
	if h == nil {
		return
	}
	to := x.newSize(x.size(h))
	x.note("ftruncate handle %d (%s) to %d", h.id, h.name, to)
	errRef, errFS := h.ref.Truncate(to), h.fs.Truncate(to)
	if !sameErr(errRef, errFS) {
		x.fail("ftruncate handle %d: local %v, mount %v", h.id, errRef, errFS)
	}
}

func (x *exerciser) truncate() {
	name := x.pickName()
	var size int64
	if fi, err := os.Stat(filepath.Join(x.ref, name)); err == nil {
		size = fi.Size()
	}
	to := x.newSize(size)
	x.note("truncate %s to %d", name, to)
	err := x.onBoth("truncate "+name, func(root string) error { return os.Truncate(filepath.Join(root, name), to) })
	if err == nil && !x.isOpen(name) {
		x.checkStored(name, "after truncate(2) of a closed file")
	}
}

func (x *exerciser) stat() {
	if _, h := x.pickHandle(); h != nil && x.rng.Intn(2) == 0 {
		x.note("fstat handle %d (%s)", h.id, h.name)
		a, errRef := h.ref.Stat()
		b, errFS := h.fs.Stat()
		if !sameErr(errRef, errFS) || (errRef == nil && a.Size() != b.Size()) {
			x.fail("fstat handle %d: local %v, mount %v", h.id, statText(a, errRef), statText(b, errFS))
		}
		return
	}
	name := x.pickName()
	x.note("stat %s", name)
	a, errRef := os.Stat(filepath.Join(x.ref, name))
	b, errFS := os.Stat(filepath.Join(x.mnt, name))
	if !sameErr(errRef, errFS) || (errRef == nil && (a.Size() != b.Size() || a.Mode() != b.Mode())) {
		x.fail("stat %s: local %v, mount %v", name, statText(a, errRef), statText(b, errFS))
	}
}

func statText(fi os.FileInfo, err error) string {
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%v size %d", fi.Mode(), fi.Size())
}

func (x *exerciser) rename() {
	from, to := x.pickName(), x.pickName()
	x.note("rename %s %s", from, to)
	if x.onBoth("rename "+from+" "+to, renameIn(from, to)) != nil || from == to {
		return
	}
	for _, h := range x.handles {
		switch h.name {
		case to:
			h.name = "" // replaced: its file has no name now
		case from:
			h.name = to
		}
	}
	if !x.isOpen(to) {
		x.checkStored(to, "after rename")
	}
	x.checkGone(from, "after rename")
}

func (x *exerciser) unlink() {
	name := x.pickName()
	x.note("unlink %s", name)
	if x.onBoth("unlink "+name, func(root string) error { return unix.Unlink(filepath.Join(root, name)) }) != nil {
		return
	}
	for _, h := range x.handles {
		if h.name == name {
			h.name = ""
		}
	}
	x.checkGone(name, "after unlink")
}

func (x *exerciser) compareHandles() {
	for _, h := range x.handles {
		a, b := make([]byte, x.size(h)+1), make([]byte, x.size(h)+1)
		nRef, errRef := h.ref.ReadAt(a, 0)
		nFS, errFS := h.fs.ReadAt(b, 0)
		if errors.Is(errRef, syscall.EBADF) { // write-only
			continue
		}
		if nRef != nFS || !sameErr(errRef, errFS) || !bytes.Equal(a[:nRef], b[:nFS]) {
			x.fail("handle %d (%s): local %d bytes, %v; mount %d bytes, %v; first difference at %d",
				h.id, h.name, nRef, errRef, nFS, errFS, firstDiff(a[:nRef], b[:nFS]))
		}
	}
}

func (x *exerciser) localDir(dir string) bool {
	fi, err := os.Stat(filepath.Join(x.ref, dir))
	return err == nil && fi.IsDir()
}

// mmapWrite changes a range of a file through a shared mapping, as
// databases and some editors do; the kernel writes the pages back.
func (x *exerciser) mmapWrite() {
	_, h := x.pickHandle()
	if h == nil || !h.rw {
		return
	}
	size := x.size(h)
	if size == 0 {
		return
	}
	off := x.rng.Int63n(size)
	n := 1 + x.rng.Int63n(min(size-off, smallWrite))
	data := make([]byte, n)
	x.rng.Read(data)
	sync := x.rng.Intn(2) == 0
	x.note("mmap write %d bytes at %d to handle %d (%s), msync %v", n, off, h.id, h.name, sync)
	if err := mmapWrite(h.ref, size, off, data, sync); err != nil {
		x.fail("local handle %d: %v", h.id, err)
	}
	if err := mmapper.write(h.fs, size, off, data, sync); err != nil {
		x.fail("mount handle %d: %v", h.id, err)
	}
}

// mmapWrite writes data at off of f (size bytes long) through a shared
// mapping, and msyncs it if asked.
func mmapWrite(f *os.File, size, off int64, data []byte, sync bool) error {
	m, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("mmap: %w", err)
	}
	copy(m[off:], data)
	if sync {
		if err := unix.Msync(m, unix.MS_SYNC); err != nil {
			return fmt.Errorf("msync: %w", err)
		}
	}
	return unix.Munmap(m)
}

// mmapper writes through shared mappings of the mount's files in a
// process of its own. In the process serving the mount, a page fault on
// such a mapping waits for that same process to answer it, and deadlocks
// with a garbage collection that stops every thread. Nor may it be a
// process forked for each write: a fork (Go's vfork) holds up the
// collection's stop too, until the child has execed, and the exec closes
// the child's copies of every file open on the mount, each close a FLUSH
// the stopped process must answer. So one helper is started before any
// file is open, and is sent each file over a socket.
var mmapper mmapHelper

type mmapHelper struct {
	mu   sync.Mutex
	sock int // SOCK_SEQPACKET to the helper; 0 until started
}

const mmapHeader = 17 // size and offset (8 bytes each), msync (1)

// start starts the helper; TestMain calls it before any test runs.
func (m *mmapHelper) start() (stop func(), err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	child := os.NewFile(uintptr(fds[1]), "mmapper")
	defer child.Close()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), helperEnv+"=mmapper")
	cmd.ExtraFiles = []*os.File{child} // its fd 3
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		unix.Close(fds[0])
		return nil, err
	}
	m.sock = fds[0]
	return func() {
		unix.Close(m.sock) // the helper reads end of file and exits
		cmd.Wait()
	}, nil
}

// write has the helper run mmapWrite on f.
func (m *mmapHelper) write(f *os.File, size, off int64, data []byte, sync bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sock <= 0 {
		return errors.New("the mmap helper was not started (TestMain starts it)")
	}
	msg := make([]byte, mmapHeader, mmapHeader+len(data))
	binary.LittleEndian.PutUint64(msg[0:], uint64(size))
	binary.LittleEndian.PutUint64(msg[8:], uint64(off))
	if sync {
		msg[16] = 1
	}
	msg = append(msg, data...)
	if err := unix.Sendmsg(m.sock, msg, unix.UnixRights(int(f.Fd())), nil, 0); err != nil {
		return fmt.Errorf("send to the mmap helper: %w", err)
	}
	reply := make([]byte, 4096)
	n, err := unix.Read(m.sock, reply)
	switch {
	case err != nil:
		return fmt.Errorf("the mmap helper's reply: %w", err)
	case n == 0:
		return errors.New("the mmap helper exited")
	case string(reply[:n]) != "ok":
		return errors.New(string(reply[:n]))
	}
	return nil
}

// serveMmaps is the helper: it runs mmapWrite for each file it is sent
// on fd 3 until that socket closes.
func serveMmaps() int {
	const sock = 3
	buf, oob := make([]byte, mmapHeader+smallWrite+1), make([]byte, unix.CmsgSpace(4))
	for {
		n, oobn, flags, _, err := unix.Recvmsg(sock, buf, oob, 0)
		if err != nil || n == 0 {
			return 0
		}
		reply := "ok"
		if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
			reply = "request too large"
		} else if err := serveMmap(buf[:n], oob[:oobn]); err != nil {
			reply = err.Error()
		}
		if _, err := unix.Write(sock, []byte(reply)); err != nil {
			return 1
		}
	}
}

func serveMmap(msg, oob []byte) error {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil || len(msgs) != 1 {
		return fmt.Errorf("no file sent (%v)", err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	for _, fd := range fds {
		defer unix.Close(fd)
	}
	if err != nil || len(fds) != 1 || len(msg) < mmapHeader {
		return fmt.Errorf("bad request (%v)", err)
	}
	f := os.NewFile(uintptr(fds[0]), "mapped")
	size, off := int64(binary.LittleEndian.Uint64(msg[0:])), int64(binary.LittleEndian.Uint64(msg[8:]))
	return mmapWrite(f, size, off, msg[mmapHeader:], msg[16] == 1)
}

// helperEnv names a test helper for TestMain to run instead of the tests,
// in a child process of the test binary.
const helperEnv = "OBJFUSE_TEST_HELPER"

var testHelpers = map[string]func() int{
	"mmapper":          serveMmaps,
	"mmap-after-close": mmapAfterClose,
}

// mmapAfterClose is a helper that maps the file $OBJFUSE_MMAP_PATH shared
// and closes its descriptor, writes "first" through the mapping and
// msyncs it, says "mapped" on stdout, and once a line
// comes on stdin writes "mapped" at the file's start through the mapping
// and unmaps it: the kernel sends no FLUSH after those writes, only
// WRITEs as the mapping goes and then the last RELEASE.
func mmapAfterClose() int {
	fd, err := unix.Open(os.Getenv("OBJFUSE_MMAP_PATH"), unix.O_RDWR, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 1
	}
	m, err := unix.Mmap(fd, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	unix.Close(fd)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mmap:", err)
		return 1
	}
	// A first write, msynced, makes the mount keep the file's content
	// locally while it is open, so the later writes need no S3.
	copy(m, "first")
	if err := unix.Msync(m, unix.MS_SYNC); err != nil {
		fmt.Fprintln(os.Stderr, "msync:", err)
		return 1
	}
	fmt.Println("mapped")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		fmt.Fprintln(os.Stderr, "stdin:", err)
		return 1
	}
	copy(m, "mapped")
	if err := unix.Munmap(m); err != nil {
		fmt.Fprintln(os.Stderr, "munmap:", err)
		return 1
	}
	return 0
}

func (x *exerciser) chmod() {
	name := x.pickName()
	mode := []os.FileMode{0o600, 0o644, 0o755}[x.rng.Intn(3)]
	x.note("chmod %s %o", name, mode)
	x.onBoth("chmod "+name, func(root string) error { return os.Chmod(filepath.Join(root, name), mode) })
}

// fchmod changes a mode through a handle, whose file may have no name
// any more.
func (x *exerciser) fchmod() {
	_, h := x.pickHandle()
	if h == nil {
		return
	}
	mode := []os.FileMode{0o600, 0o644, 0o755}[x.rng.Intn(3)]
	x.note("fchmod handle %d (%s) %o", h.id, h.name, mode)
	errRef, errFS := h.ref.Chmod(mode), h.fs.Chmod(mode)
	if !sameErr(errRef, errFS) {
		x.fail("fchmod handle %d: local %v, mount %v", h.id, errRef, errFS)
	}
	if errRef == nil && h.name == "" {
		x.checkNoStrayKeys("after fchmod of a file without a name")
	}
}

func (x *exerciser) list() {
	dir := append([]string{"."}, exerciseDirs...)[x.rng.Intn(len(exerciseDirs)+1)]
	x.note("list %s", dir)
	a, errRef := os.ReadDir(filepath.Join(x.ref, dir))
	b, errFS := os.ReadDir(filepath.Join(x.mnt, dir))
	if !sameErr(errRef, errFS) {
		x.fail("list %s: local %v, mount %v", dir, errRef, errFS)
	}
	var na, nb []string
	for _, e := range a {
		na = append(na, e.Name()+" "+e.Type().String())
	}
	for _, e := range b {
		nb = append(nb, e.Name()+" "+e.Type().String())
	}
	if !slices.Equal(na, nb) {
		x.fail("list %s: local %v, mount %v", dir, na, nb)
	}
}

func renameIn(from, to string) func(root string) error {
	return func(root string) error { return os.Rename(filepath.Join(root, from), filepath.Join(root, to)) }
}

func (x *exerciser) pickDir() string { return exerciseDirs[x.rng.Intn(len(exerciseDirs))] }

func (x *exerciser) mkdir() {
	dir := x.pickDir()
	x.note("mkdir %s", dir)
	x.onBoth("mkdir "+dir, func(root string) error { return os.Mkdir(filepath.Join(root, dir), 0o755) })
}

func (x *exerciser) rmdir() {
	dir := x.pickDir()
	x.note("rmdir %s", dir)
	if x.onBoth("rmdir "+dir, func(root string) error { return unix.Rmdir(filepath.Join(root, dir)) }) == nil {
		x.checkNoStrayKeys("after rmdir")
	}
}

// renameDir moves one directory onto the other's name (allowed when that
// one is missing or empty); open files inside move with it.
func (x *exerciser) renameDir() {
	from, to := x.pickDir(), x.pickDir()
	x.note("rename directory %s %s", from, to)
	if x.onBoth("rename directory "+from+" "+to, renameIn(from, to)) != nil || from == to {
		return
	}
	for _, h := range x.handles {
		if rest, ok := strings.CutPrefix(h.name, from+"/"); ok {
			h.name = to + "/" + rest
		}
	}
	for _, name := range exerciseNames {
		if strings.HasPrefix(name, to+"/") && x.exists(name) && !x.isOpen(name) {
			x.checkStored(name, "after renaming its directory")
		}
	}
	x.checkNoStrayKeys("after renaming a directory")
}

func (x *exerciser) exists(name string) bool {
	_, err := os.Stat(filepath.Join(x.ref, name))
	return err == nil
}

// readWhole reads a file by its path through a new open, as another
// program would while handles are open.
func (x *exerciser) readWhole() {
	name := x.pickName()
	x.note("read whole %s", name)
	a, errRef := os.ReadFile(filepath.Join(x.ref, name))
	b, errFS := os.ReadFile(filepath.Join(x.mnt, name))
	if !sameErr(errRef, errFS) {
		x.fail("read %s: local %v, mount %v", name, errRef, errFS)
	}
	if len(a) != len(b) {
		x.fail("read %s: local %d bytes, mount %d", name, len(a), len(b))
	}
	if !bytes.Equal(a, b) {
		x.fail("read %s: bytes differ from offset %d", name, firstDiff(a, b))
	}
}

// checkStored: S3 holds what the local file holds (in async mode, soon).
func (x *exerciser) checkStored(name, when string) {
	x.t.Helper()
	if x.storeWait == 0 {
		x.checkStoredNow(name, when)
		return
	}
	want, err := os.ReadFile(filepath.Join(x.ref, name))
	if err != nil {
		x.fail("read local %s: %v", name, err)
	}
	stored := pollUntil(x.storeWait, func() bool {
		got, err := x.storedBytes(name)
		return err == nil && bytes.Equal(got, want)
	})
	if !stored {
		x.checkStoredNow(name, when+fmt.Sprintf(" (waited %v)", x.storeWait))
	}
}

func (x *exerciser) checkStoredNow(name, when string) {
	x.t.Helper()
	x.checkNoStrayKeys(when)
	want, err := os.ReadFile(filepath.Join(x.ref, name))
	if err != nil {
		x.fail("read local %s: %v", name, err)
	}
	got, err := x.storedBytes(name)
	switch {
	case err != nil:
		x.fail("%s: S3 has no %s (%v); the local file has %d bytes", when, name, err, len(want))
	case len(got) != len(want):
		x.fail("%s: S3 holds %d bytes of %s, the local file %d", when, len(got), name, len(want))
	case !bytes.Equal(got, want):
		x.fail("%s: S3's %s differs from the local file from offset %d", when, name, firstDiff(got, want))
	}
}

// checkNoStrayKeys: S3 holds no key but the exercised names that exist
// locally and the directory's marker, such as an unlinked file uploaded
// under some made-up name.
func (x *exerciser) checkNoStrayKeys(when string) {
	x.t.Helper()
	for e, err := range x.st.List(context.Background(), "", "", true) {
		if err != nil {
			x.fail("%s: list the bucket: %v", when, err)
		}
		key, inside := strings.CutPrefix(e.Key, x.opts.Prefix)
		if !inside {
			x.fail("%s: S3 holds %q, outside the mount's prefix %q", when, e.Key, x.opts.Prefix)
		}
		if x.sub != "" {
			first, rest, _ := strings.Cut(key, "/")
			switch {
			case first != x.sub && slices.Contains(x.siblings, first):
				continue // another exerciser's
			case first != x.sub:
				x.fail("%s: S3 holds a key no one made: %q", when, e.Key)
			case rest == "":
				continue // the directory's marker
			}
			key = rest
		}
		dir, _, _ := strings.Cut(key, "/")
		if slices.Contains(exerciseDirs, dir) && !x.localDir(dir) {
			x.fail("%s: S3 holds %q, but directory %s was removed", when, e.Key, dir)
		}
		switch {
		case slices.Contains(exerciseDirs, strings.TrimSuffix(key, "/")):
		case !slices.Contains(exerciseNames, key):
			x.fail("%s: S3 holds a key no one made: %q", when, e.Key)
		case !x.exists(key):
			x.fail("%s: S3 holds %q, which no longer exists", when, e.Key)
		}
	}
}

// checkGone: the name is no object in S3 (in async mode, soon: a
// pending upload of the file's old name may land first).
func (x *exerciser) checkGone(name, when string) {
	x.t.Helper()
	var err error
	gone := pollUntil(x.storeWait, func() bool {
		_, err = x.storedBytes(name)
		return errors.Is(err, store.ErrNotExist)
	})
	if !gone {
		x.fail("%s: S3 still has %s (%v)", when, name, err)
	}
}

func (x *exerciser) storedBytes(name string) ([]byte, error) {
	body, err := x.st.Get(context.Background(), x.keyPrefix+name, store.AnyVersion, 0, -1)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	return io.ReadAll(body)
}

// compareTree: every exercised name, and the two directories' listings,
// are the same under root as in the local directory.
func (x *exerciser) compareTree(root, what string) {
	x.t.Helper()
	for _, dir := range append([]string{"."}, exerciseDirs...) {
		if !x.localDir(dir) {
			if _, err := os.Stat(filepath.Join(root, dir)); !errors.Is(err, os.ErrNotExist) {
				x.fail("%s: directory %s, removed, is there (%v)", what, dir, err)
			}
			continue
		}
		a, b := listNames(x.t, filepath.Join(x.ref, dir)), listNames(x.t, filepath.Join(root, dir))
		if !slices.Equal(a, b) {
			var keys []string
			for e, err := range x.st.List(context.Background(), "", "", true) {
				keys = append(keys, fmt.Sprint(e.Key, err))
			}
			x.fail("%s lists %s as %v, the local directory %v (S3: %v)", what, dir, b, a, keys)
		}
	}
	for _, name := range exerciseNames {
		a, errRef := os.ReadFile(filepath.Join(x.ref, name))
		b, errFS := os.ReadFile(filepath.Join(root, name))
		if !sameErr(errRef, errFS) || !bytes.Equal(a, b) {
			x.fail("%s: %s is %d bytes (%v), the local file %d bytes (%v), first difference at %d",
				what, name, len(b), errFS, len(a), errRef, firstDiff(a, b))
		}
		if errRef != nil {
			continue
		}
		fa, errRef := os.Stat(filepath.Join(x.ref, name))
		fb, errFS := os.Stat(filepath.Join(root, name))
		if errRef != nil || errFS != nil || fa.Mode() != fb.Mode() {
			x.fail("%s: %s is %s, the local file %s", what, name, statText(fb, errFS), statText(fa, errRef))
		}
	}
}

package fusefs_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"iter"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/objfuse/objfuse/fusefs"
	"github.com/objfuse/objfuse/fusefs/limits"
	"github.com/objfuse/objfuse/fusefs/store"
	"github.com/objfuse/objfuse/fusefs/store/memstore"
)

// budgetChild, set, runs TestTheMemoryBudgetHolds's workloads in this
// process; unset, the test runs them in a new one.
const budgetChild = "OBJFUSE_BUDGET_CHILD"

// budgetTest is the budget the workloads of TestTheMemoryBudgetHolds run
// under: four parts of budgetPart.
const (
	budgetPart = 5 << 20
	budgetTest = 4 * budgetPart
)

// TestTheMemoryBudgetHolds: a mount under a fixed budget (MemoryLimit)
// runs the workloads that make S3 mounters grow until they are killed —
// one long copy, many writers at once, many readers at once — and its
// live heap with the part buffers it mapped outside the heap never
// exceeds the budget plus what every mount holds whatever it does (go-fuse's request buffers, the runtime's own). Writers wait
// for uploads or go on on disk, readahead shrinks; every byte still
// arrives. The store keeps no bytes (memstore.NewPatterned): a store in
// the same heap holding what was written would hide what the mount holds.
// A directory of a million names is listed as ls lists it, the names
// made up as the store lists them.
func TestTheMemoryBudgetHolds(t *testing.T) {
	if raceDetector {
		t.Skip("the race detector's instrumentation changes what the heap holds: `make unit` runs this test without it")
	}
	if os.Getenv(budgetChild) == "" {
		// In a process of its own: what other tests left running (a
		// mount's background uploads, retries) would count here too.
		cmd := exec.Command(os.Args[0], "-test.run=^TestTheMemoryBudgetHolds$", "-test.v", "-test.count=1", "-test.timeout=4m")
		// Under a GOMEMLIMIT as a mounter pod's limit sets it (the
		// budget and the runtime's share), with room for the test's own
		// buffers (two of 1 MiB for each of up to 16 programs): a
		// collector starved below what is live would only make the run
		// slow, not the heap smaller.
		limit := budgetTest + limits.RuntimeReserve + 16*2<<20
		cmd.Env = append(os.Environ(), budgetChild+"=1", fmt.Sprintf("GOMEMLIMIT=%dMiB", limit>>20))
		out, err := cmd.CombinedOutput()
		t.Logf("the workloads, in a process of their own:\n%s", out)
		if err != nil {
			t.Fatalf("the workloads' process: %v", err)
		}
		return
	}
	// Each of a workload's programs has its buffers (bufs[i]) before the
	// heap is measured: they are the test's, not the mount's.
	workloads := []struct {
		name     string
		programs int
		prepare  func(t *testing.T, st store.Store)
		run      func(t *testing.T, dir string, bufs []programBuffers)
	}{
		{"one long copy", 1, nil, func(t *testing.T, dir string, bufs []programBuffers) {
			writePattern(t, dir, "copy", 256<<20, bufs[0])
		}},
		{"16 writers at once", 16, nil, func(t *testing.T, dir string, bufs []programBuffers) {
			side(16, func(i int) { writePattern(t, dir, fmt.Sprintf("w%02d", i), 32<<20, bufs[i]) })
		}},
		{"a listing of a million names", 1, nil, func(t *testing.T, dir string, _ []programBuffers) {
			countNames(t, filepath.Join(dir, hugeDir), hugeNames)
		}},
		{"8 readers at once", 8, func(t *testing.T, st store.Store) {
			for i := range 8 {
				putPattern(t, st, fmt.Sprintf("r%02d", i), 64<<20)
			}
		}, func(t *testing.T, dir string, bufs []programBuffers) {
			side(8, func(i int) { readPattern(t, dir, fmt.Sprintf("r%02d", i), 64<<20, bufs[i]) })
		}},
	}
	for _, w := range workloads {
		t.Run(w.name, func(t *testing.T) {
			st := memstore.NewPatterned()
			if w.prepare != nil {
				w.prepare(t, st)
			}
			f, dir := mountFSOf(t, &generatedDir{Store: st, prefix: hugeDir + "/", count: hugeNames},
				fusefs.Options{MemoryLimit: budgetTest, PartSize: budgetPart, Concurrency: 3})
			bufs := make([]programBuffers, w.programs)
			for i := range bufs {
				bufs[i] = programBuffers{make([]byte, 1<<20), make([]byte, 1<<20)}
			}
			held := func() int64 { return heldMemory(f) }
			peak := watchHeld(t, held, held())
			w.run(t, dir, bufs)
			runtime.KeepAlive(bufs)
			got := peak()
			// As checkHeldMemory: go-fuse's 1 MiB request buffer per
			// reader (up to GOMAXPROCS, at most 16, and one more), and
			// 16 MiB for the rest of what a mount holds; and the buffer
			// of each program's request in flight, which a writer waiting
			// for the budget holds (the kernel sends one WRITE per write
			// call at a time).
			slack := int64(16<<20 + (min(runtime.GOMAXPROCS(0), 16)+1+w.programs)<<20)
			t.Logf("peak live heap and mapped buffers above the idle mount's: %.1f MiB (budget %d MiB, slack %d MiB); %d buffer bytes held at the end, %d spills to disk",
				float64(got)/(1<<20), budgetTest>>20, slack>>20, f.Stats().BufferBytes.Load(), f.Stats().MemorySpills.Load())
			if got > budgetTest+slack {
				t.Fatalf("the live heap and mapped buffers grew by %.1f MiB, over the %d MiB budget and %d MiB slack", float64(got)/(1<<20), budgetTest>>20, slack>>20)
			}
		})
	}
}

// watchHeld samples held (the live heap and the part buffers mapped
// outside it), less base, until the returned func is called, which
// returns the largest sample (one more taken then). Each sample collects
// garbage first: what is counted is what the mount holds, not what the
// collector has yet to free.
func watchHeld(t *testing.T, held func() int64, base int64) (peak func() int64) {
	var top atomic.Int64
	sample := func() {
		// What go-fuse's pools hold unused is the collector's to free,
		// as garbage is. Mapped part buffers kept for reuse count: they
		// are the mount's until they have been idle for 10 s.
		runtime.GC()
		top.Store(max(top.Load(), held()-base))
	}
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				sample()
			}
		}
	}()
	once := sync.OnceValue(func() int64 {
		close(stop)
		<-stopped
		sample()
		return top.Load()
	})
	t.Cleanup(func() { once() })
	return once
}

// programBuffers are the two buffers one program of a workload uses.
type programBuffers struct{ io, want []byte }

// side runs n copies of work at once and waits for them.
func side(n int, work func(i int)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			work(i)
		}()
	}
	wg.Wait()
}

// writePattern writes name's pattern, size bytes, in 1 MiB writes, and
// closes it: the patterned store fails an upload of any other bytes.
func writePattern(t *testing.T, dir, name string, size int64, bufs programBuffers) {
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		t.Error(err)
		return
	}
	defer f.Close()
	buf := bufs.io
	for off := int64(0); off < size; off += int64(len(buf)) {
		memstore.Pattern(name, off, buf)
		if _, err := f.Write(buf); err != nil {
			t.Errorf("write %s at %d: %v", name, off, err)
			return
		}
	}
	if err := f.Close(); err != nil {
		t.Errorf("close %s: %v", name, err)
	}
}

// readPattern reads name whole through the mount, checking every byte.
func readPattern(t *testing.T, dir, name string, size int64, bufs programBuffers) {
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		t.Error(err)
		return
	}
	defer f.Close()
	buf, want := bufs.io, bufs.want
	var off int64
	for {
		n, err := io.ReadFull(f, buf)
		memstore.Pattern(name, off, want[:n])
		if !bytes.Equal(buf[:n], want[:n]) {
			t.Errorf("read %s: the bytes at %d are not what was stored", name, off)
			return
		}
		off += int64(n)
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			t.Errorf("read %s at %d: %v", name, off, err)
			return
		}
	}
	if off != size {
		t.Errorf("read %s: %d bytes, want %d", name, off, size)
	}
}

// putPattern stores name's pattern, size bytes, straight in st.
func putPattern(t *testing.T, st store.Store, name string, size int64) {
	t.Helper()
	r := io.LimitReader(memstore.PatternFrom(name, 0), size)
	if _, err := st.Put(context.Background(), name, r, size, nil); err != nil {
		t.Fatal(err)
	}
}

// The huge directory of TestTheMemoryBudgetHolds.
const (
	hugeDir   = "huge"
	hugeNames = 1_000_000
)

// generatedDir is a store whose directory prefix holds count empty files
// made up as they are listed or asked for: a directory of a million names
// that the test's own heap does not hold.
type generatedDir struct {
	store.Store
	prefix string
	count  int
}

func (g *generatedDir) object(i int) store.Object {
	return store.Object{Key: fmt.Sprintf("%sf%07d", g.prefix, i), ETag: "generated", Metadata: map[string]string{}}
}

func (g *generatedDir) List(ctx context.Context, prefix, startAfter string, recursive bool) iter.Seq2[store.Entry, error] {
	if !strings.HasPrefix(prefix, g.prefix) {
		return g.Store.List(ctx, prefix, startAfter, recursive)
	}
	return func(yield func(store.Entry, error) bool) {
		for i := range g.count {
			o := g.object(i)
			if o.Key <= startAfter || !strings.HasPrefix(o.Key, prefix) {
				continue
			}
			if err := ctx.Err(); err != nil {
				yield(store.Entry{}, err)
				return
			}
			if !yield(store.Entry{Object: o}, nil) {
				return
			}
		}
	}
}

func (g *generatedDir) Head(ctx context.Context, key string) (store.Object, error) {
	var i int
	if _, err := fmt.Sscanf(strings.TrimPrefix(key, g.prefix), "f%07d", &i); err == nil && strings.HasPrefix(key, g.prefix) && i < g.count {
		if o := g.object(i); o.Key == key {
			return o, nil
		}
	}
	return g.Store.Head(ctx, key)
}

// countNames reads dir's names as ls does (getdents, which the kernel
// serves with READDIRPLUS), a buffer at a time, keeping none, and checks
// that there are want of them, in order and each once.
func countNames(t *testing.T, dir string, want int) {
	f, err := os.Open(dir)
	if err != nil {
		t.Error(err)
		return
	}
	defer f.Close()
	got, last := 0, ""
	for {
		names, err := f.Readdirnames(1024)
		for _, name := range names {
			if name <= last {
				t.Errorf("listing %s: %q after %q", dir, name, last)
				return
			}
			got, last = got+1, name
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Errorf("listing %s: %v", dir, err)
			return
		}
	}
	if got != want {
		t.Errorf("listed %d names in %s, want %d", got, dir, want)
	}
}

package fusefs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/objfuse/objfuse/fusefs"
	"github.com/objfuse/objfuse/fusefs/store"
)

const quotaMiB = 1 << 20

// writeUntilFull writes chunk after chunk to path until a write fails,
// and returns what was acknowledged and the error that stopped it.
func writeUntilFull(t *testing.T, h *os.File, chunk []byte, most int) (int, error) {
	t.Helper()
	written := 0
	for written < most {
		n, err := h.Write(chunk)
		written += n
		if err != nil {
			return written, err
		}
	}
	return written, nil
}

func statfs(t *testing.T, dir string) (blocks, avail uint64) {
	t.Helper()
	var s syscall.Statfs_t
	if err := syscall.Statfs(dir, &s); err != nil {
		t.Fatal(err)
	}
	return s.Blocks * uint64(s.Bsize), s.Bavail * uint64(s.Bsize)
}

func storedSum(t *testing.T, st store.Store) int64 {
	t.Helper()
	var total int64
	for e, err := range st.List(context.Background(), "", "", true) {
		if err != nil {
			t.Fatal(err)
		}
		total += e.Size
	}
	return total
}

// A mount with a capacity counts what the store already holds, writes
// until the capacity and then fails with ENOSPC, the write that crosses it
// short; the object holds exactly what was acknowledged; statfs shows
// capacity and what is left.
func TestQuotaWriteStopsAtCapacity(t *testing.T) {
	for _, b := range backends()[:2] {
		t.Run(b.name, func(t *testing.T) {
			st := b.fresh(t)
			put(t, st, "old", randomBytes(quotaMiB+100))
			dir := mountFS(t, st, fusefs.Options{Capacity: 4 * quotaMiB})
			if blocks, avail := statfs(t, dir); blocks != 4*quotaMiB || avail != 3*quotaMiB-4096 {
				t.Fatalf("statfs before writing: %d bytes, %d available; want %d and %d", blocks, avail, 4*quotaMiB, 3*quotaMiB-4096)
			}
			h, err := os.Create(filepath.Join(dir, "new"))
			if err != nil {
				t.Fatal(err)
			}
			chunk := randomBytes(48 << 10) // not a divisor of the room left
			written, werr := writeUntilFull(t, h, chunk, 8*quotaMiB)
			if !errors.Is(werr, syscall.ENOSPC) {
				t.Fatalf("writing past the capacity: %v after %d bytes, want ENOSPC", werr, written)
			}
			if room := 3*quotaMiB - 100; written != room {
				t.Fatalf("acknowledged %d bytes before ENOSPC, want the %d left", written, room)
			}
			if err := h.Close(); err != nil {
				t.Fatalf("close after ENOSPC: %v (what was acknowledged fits)", err)
			}
			want := bytes.Repeat(chunk, written/len(chunk)+1)[:written]
			if got := stored(t, st, "new"); !bytes.Equal(got, want) {
				t.Fatalf("the object holds %d bytes, not the %d acknowledged", len(got), len(want))
			}
			if _, avail := statfs(t, dir); avail != 0 {
				t.Fatalf("statfs when full: %d bytes available, want 0", avail)
			}
			// Extending by truncate(2) is all or nothing.
			if err := os.Truncate(filepath.Join(dir, "new"), int64(written)+1); !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("truncate past the capacity: %v, want ENOSPC", err)
			}
			// Removing a file makes room at once.
			if err := os.Remove(filepath.Join(dir, "old")); err != nil {
				t.Fatal(err)
			}
			if _, avail := statfs(t, dir); avail < quotaMiB {
				t.Fatalf("statfs after removing 1 MiB: %d bytes available", avail)
			}
			if err := os.WriteFile(filepath.Join(dir, "more"), randomBytes(quotaMiB), 0o644); err != nil {
				t.Fatalf("writing into the room a removal made: %v", err)
			}
		})
	}
}

// Rewriting a file in place (O_TRUNC, same size) needs no room beyond
// it: the version it replaces is not counted twice.
func TestQuotaRewriteIsNotCountedTwice(t *testing.T) {
	st := backends()[0].fresh(t)
	dir := mountFS(t, st, fusefs.Options{Capacity: 4 * quotaMiB})
	p := filepath.Join(dir, "f")
	for i := range 3 {
		if err := os.WriteFile(p, randomBytes(3*quotaMiB), 0o644); err != nil {
			t.Fatalf("write %d of a 3 MiB file into 4 MiB: %v", i, err)
		}
	}
	if _, avail := statfs(t, dir); avail != quotaMiB {
		t.Fatalf("available after rewriting: %d, want 1 MiB", avail)
	}
}

// SetCapacity (a volume expanded) lets a writer that hit the capacity
// write on through the same descriptor.
func TestQuotaGrowsOnALiveMount(t *testing.T) {
	st := backends()[0].fresh(t)
	f, dir := mountFSOf(t, st, fusefs.Options{Capacity: 2 * quotaMiB})
	h, err := os.Create(filepath.Join(dir, "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	chunk := randomBytes(64 << 10)
	if n, err := writeUntilFull(t, h, chunk, 4*quotaMiB); !errors.Is(err, syscall.ENOSPC) || n != 2*quotaMiB {
		t.Fatalf("writing into 2 MiB: %d bytes, %v", n, err)
	}
	f.SetCapacity(4 * quotaMiB)
	if blocks, _ := statfs(t, dir); blocks != 4*quotaMiB {
		t.Fatalf("statfs after the expansion: %d bytes, want 4 MiB", blocks)
	}
	if n, err := writeUntilFull(t, h, chunk, 2*quotaMiB); err != nil {
		t.Fatalf("writing on after the expansion: %v after %d bytes", err, n)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if got := len(stored(t, st, "f")); got != 4*quotaMiB {
		t.Fatalf("stored %d bytes, want 4 MiB", got)
	}
}

// What other clients store counts at the mount's next sum, and the
// capacity recorded elsewhere (an expansion) is taken from CapacitySource.
func TestQuotaFollowsTheStore(t *testing.T) {
	st := backends()[0].fresh(t)
	var recorded sync.Map
	recorded.Store("c", int64(8*quotaMiB))
	dir := mountFS(t, st, fusefs.Options{
		Capacity:     8 * quotaMiB,
		QuotaRefresh: 50 * time.Millisecond,
		CapacitySource: func(context.Context) (int64, error) {
			c, _ := recorded.Load("c")
			return c.(int64), nil
		},
	})
	put(t, st, "elsewhere", randomBytes(2*quotaMiB))
	eventually(t, 10*time.Second, "statfs counts an object another client stored", func() bool {
		_, avail := statfs(t, dir)
		return avail == 6*quotaMiB
	})
	recorded.Store("c", int64(16*quotaMiB))
	eventually(t, 10*time.Second, "statfs shows the capacity recorded elsewhere", func() bool {
		blocks, _ := statfs(t, dir)
		return blocks == 16*quotaMiB
	})
}

// Two mounts of one volume writing at once stop near the capacity and pass
// it by no more than the documented bound: one slack (1 MiB here) plus
// what the other held unuploaded (one file, uploaded at its close).
func TestQuotaSharedOvershootIsBounded(t *testing.T) {
	const capacity, file = 8 * quotaMiB, 128 << 10
	st := backends()[0].fresh(t)
	var dirs []string
	for range 2 {
		dirs = append(dirs, mountFS(t, st, fusefs.Options{Capacity: capacity}))
	}
	var wg sync.WaitGroup
	errs := make([]error, len(dirs))
	for i, dir := range dirs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			data := randomBytes(file)
			for j := 0; ; j++ {
				if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("m%d-%d", i, j)), data, 0o644); err != nil {
					errs[i] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, syscall.ENOSPC) {
			t.Errorf("mount %d stopped with %v, want ENOSPC", i, err)
		}
	}
	total := storedSum(t, st)
	bound := int64(capacity + quotaMiB + file)
	t.Logf("two mounts stored %d bytes against a capacity of %d (bound %d)", total, capacity, bound)
	if total > bound || total < capacity-2*file {
		t.Fatalf("stored %d bytes; want between %d and %d", total, capacity-2*file, bound)
	}
}

// A write past a hole the capacity cannot hold fails with ENOSPC and
// holds back nothing: other writes still get the room.
func TestQuotaAWriteThatDoesNotFitTakesNoRoom(t *testing.T) {
	st := backends()[0].fresh(t)
	dir := mountFS(t, st, fusefs.Options{Capacity: 4 * quotaMiB})
	h, err := os.Create(filepath.Join(dir, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if _, err := h.WriteAt([]byte("x"), 100*quotaMiB); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("a write 100 MiB into a 4 MiB volume: %v, want ENOSPC", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), randomBytes(3*quotaMiB), 0o644); err != nil {
		t.Fatalf("3 MiB into the 4 MiB left: %v", err)
	}
}

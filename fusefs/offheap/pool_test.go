package offheap_test

import (
	"runtime/debug"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/objfuse/objfuse/fusefs/offheap"
)

const size = 1 << 20

// TestBuffersAreReusedAndGivenBackWhenIdle: a buffer given back is the
// next one handed out (no new mapping), and once idle for the pool's idle
// time its memory goes back to the system.
func TestBuffersAreReusedAndGivenBackWhenIdle(t *testing.T) {
	p := offheap.NewPool(size, time.Hour) // nothing is trimmed while reuse is checked
	defer p.Close()
	a, b := get(t, p), get(t, p)
	if len(*a) != size || len(*b) != size {
		t.Fatalf("buffers of %d and %d bytes, want %d", len(*a), len(*b), size)
	}
	(*a)[0], (*a)[size-1] = 1, 2 // mapped, writable to the end
	if got := p.Mapped(); got != 2*size {
		t.Fatalf("%d bytes mapped with two buffers out, want %d", got, 2*size)
	}
	*a = (*a)[:10] // a caller's shortened view
	p.Put(a)
	if c := get(t, p); c != a || len(*c) != size {
		t.Fatalf("the buffer given back was not reused whole (len %d)", len(*c))
	}
	if got := p.Mapped(); got != 2*size {
		t.Fatalf("%d bytes mapped after a reuse, want %d", got, 2*size)
	}

	q := offheap.NewPool(size, 10*time.Millisecond)
	defer q.Close()
	x, y := get(t, q), get(t, q)
	q.Put(x)
	q.Put(y)
	waitMapped(t, q, 0)
}

// get is p.Get, failing the test on an error.
func get(t *testing.T, p *offheap.Pool) *[]byte {
	t.Helper()
	b, err := p.Get()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// waitMapped polls, with a deadline, until p has want bytes mapped.
func waitMapped(t *testing.T, p *offheap.Pool, want int64) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for p.Mapped() != want {
		select {
		case <-deadline:
			t.Fatalf("%d bytes mapped 5 s on, want %d", p.Mapped(), want)
		case <-tick.C:
		}
	}
}

// TestABufferInUseIsNeverUnmapped: trimming takes only buffers given
// back; one held past many idle times stays mapped and writable.
func TestABufferInUseIsNeverUnmapped(t *testing.T) {
	p := offheap.NewPool(size, time.Millisecond)
	defer p.Close()
	held, other := get(t, p), get(t, p)
	p.Put(other)
	waitMapped(t, p, size)
	for i := range *held {
		(*held)[i] = byte(i)
	}
	p.Put(held)
}

// TestCloseUnmapsTheFreeBuffers: a closed pool keeps nothing mapped
// but what is still out.
func TestCloseUnmapsTheFreeBuffers(t *testing.T) {
	p := offheap.NewPool(size, time.Hour)
	out, free := get(t, p), get(t, p)
	p.Put(free)
	p.Close()
	if got := p.Mapped(); got != size {
		t.Fatalf("%d bytes mapped after Close with one buffer out, want %d", got, size)
	}
	p.Put(out)
	p.Close()
	if got := p.Mapped(); got != 0 {
		t.Fatalf("%d bytes mapped after the last Close, want 0", got)
	}
}

// TestTheGoLimitLeavesRoomForMappedBuffers: under Within, the runtime's
// soft limit is the process's total less what is mapped, as buffers are
// mapped and unmapped, and never under half the total. The total is
// large and the buffers untouched (no memory used), so the collector is
// never starved while the test runs.
func TestTheGoLimitLeavesRoomForMappedBuffers(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() {
		offheap.Within(0)
		debug.SetMemoryLimit(before)
	})
	const (
		total = 16 << 30
		big   = 2 << 30 // an eighth of the total: the floor comes at the fifth
	)
	offheap.Within(total)
	base := offheap.GoLimit() // total, less what other tests left mapped
	p := offheap.NewPool(big, time.Hour)
	var out []*[]byte
	for i := 1; i <= 6; i++ {
		out = append(out, get(t, p))
		if want := max(base-int64(i)*big, total/2); offheap.GoLimit() != want {
			t.Fatalf("Go limit %d with %d buffers mapped, want %d", offheap.GoLimit(), i, want)
		}
	}
	for _, b := range out {
		p.Put(b)
	}
	p.Close()
	if got := offheap.GoLimit(); got != base {
		t.Fatalf("Go limit %d once every buffer is unmapped, want %d", got, base)
	}
}

// TestPopulatedBuffersAreInMemory: a populated pool's buffer has every
// page in memory before anything writes to it; a plain pool's has none.
func TestPopulatedBuffersAreInMemory(t *testing.T) {
	for _, c := range []struct {
		name    string
		pool    *offheap.Pool
		missing int
	}{
		{"populated", offheap.NewPopulatedPool(size, time.Hour), 0},
		{"plain", offheap.NewPool(size, time.Hour), size / unix.Getpagesize()},
	} {
		t.Run(c.name, func(t *testing.T) {
			defer c.pool.Close()
			b := get(t, c.pool)
			defer c.pool.Put(b)
			vec := make([]byte, size/unix.Getpagesize())
			if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&(*b)[0])), uintptr(len(*b)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
				t.Fatalf("mincore: %v", e)
			}
			missing := 0
			for _, v := range vec {
				if v&1 == 0 {
					missing++
				}
			}
			if missing != c.missing {
				t.Fatalf("%d of %d pages not in memory, want %d", missing, len(vec), c.missing)
			}
		})
	}
}

package offheap_test

import (
	"runtime/debug"
	"testing"
	"time"

	"github.com/objfuse/objfuse/fusefs/offheap"
)

const size = 1 << 20

// TestBuffersAreReusedAndGivenBackWhenIdle: a buffer given back is the
// next one handed out (no new mapping), and once idle for the pool's idle
// time its memory goes back to the system.
func TestBuffersAreReusedAndGivenBackWhenIdle(t *testing.T) {
	p := offheap.NewPool(size, 50*time.Millisecond)
	defer p.Close()
	a, err := p.Get()
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Get()
	if err != nil {
		t.Fatal(err)
	}
	if len(*a) != size || len(*b) != size {
		t.Fatalf("buffers of %d and %d bytes, want %d", len(*a), len(*b), size)
	}
	(*a)[0], (*a)[size-1] = 1, 2 // mapped, writable to the end
	if got := p.Mapped(); got != 2*size {
		t.Fatalf("%d bytes mapped with two buffers out, want %d", got, 2*size)
	}
	*a = (*a)[:10] // a caller's shortened view
	p.Put(a)
	c, err := p.Get()
	if err != nil {
		t.Fatal(err)
	}
	if c != a || len(*c) != size {
		t.Fatalf("the buffer given back was not reused whole (len %d)", len(*c))
	}
	if got := p.Mapped(); got != 2*size {
		t.Fatalf("%d bytes mapped after a reuse, want %d", got, 2*size)
	}
	p.Put(b)
	p.Put(c)
	deadline := time.Now().Add(5 * time.Second)
	for p.Mapped() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes still mapped 5 s after every buffer came back idle", p.Mapped())
		}
		time.Sleep(time.Millisecond) // polling, with the deadline above
	}
}

// TestABufferInUseIsNeverUnmapped: trimming takes only buffers given
// back; one held past many idle times stays mapped and writable.
func TestABufferInUseIsNeverUnmapped(t *testing.T) {
	p := offheap.NewPool(size, time.Millisecond)
	defer p.Close()
	held, err := p.Get()
	if err != nil {
		t.Fatal(err)
	}
	other, err := p.Get()
	if err != nil {
		t.Fatal(err)
	}
	p.Put(other)
	deadline := time.Now().Add(5 * time.Second)
	for p.Mapped() != size {
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes mapped, want only the held buffer's %d", p.Mapped(), size)
		}
		time.Sleep(time.Millisecond)
	}
	for i := range *held {
		(*held)[i] = byte(i)
	}
	p.Put(held)
}

// TestCloseUnmapsTheFreeBuffers: a closed pool keeps nothing mapped
// but what is still out.
func TestCloseUnmapsTheFreeBuffers(t *testing.T) {
	p := offheap.NewPool(size, time.Hour)
	out, _ := p.Get()
	free, _ := p.Get()
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
// mapped and unmapped, and never under half the total.
func TestTheGoLimitLeavesRoomForMappedBuffers(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() {
		offheap.Within(0)
		debug.SetMemoryLimit(before)
	})
	const total = 8 * size
	offheap.Within(total)
	if got := offheap.GoLimit(); got != total {
		t.Fatalf("Go limit %d with nothing mapped, want %d", got, total)
	}
	p := offheap.NewPool(size, time.Hour)
	var out []*[]byte
	for i := 1; i <= 6; i++ {
		b, err := p.Get()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
		if want := max(int64(total-i*size), total/2); offheap.GoLimit() != want {
			t.Fatalf("Go limit %d with %d buffers mapped, want %d", offheap.GoLimit(), i, want)
		}
	}
	for _, b := range out {
		p.Put(b)
	}
	p.Close()
	if got := offheap.GoLimit(); got != total {
		t.Fatalf("Go limit %d once every buffer is unmapped, want %d", got, total)
	}
}

package fusefs

import "testing"

// A request buffer goes back to the mapped pool it came from and is the
// next one handed out; a slice of another size comes from the heap, and
// a slice the pool did not hand out is not taken.
func TestRequestBuffersAreReused(t *testing.T) {
	r := &requestBuffers{out: map[*byte]*[]byte{}}
	defer r.close()
	const size = 64 << 10
	a := r.Get(size)
	if len(a) != size || r.mapped() != size {
		t.Fatalf("a buffer of %d bytes, %d mapped; want %d and %d", len(a), r.mapped(), size, size)
	}
	r.Put(a[:0]) // go-fuse may give back a slice cut to nothing: same start
	if b := r.Get(size); &b[0] != &a[0] || r.mapped() != size {
		t.Fatalf("the buffer given back was not reused: %d bytes mapped", r.mapped())
	} else {
		r.Put(b)
	}
	other := r.Get(size * 2)
	r.Put(other)
	r.Put(make([]byte, size))
	if len(other) != 2*size || r.mapped() != size || len(r.out) != 0 {
		t.Fatalf("after a buffer of another size and a foreign one: %d mapped, %d out; want %d and none", r.mapped(), len(r.out), size)
	}
}

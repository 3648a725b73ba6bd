package fusefs

import (
	"math/rand/v2"
	"os"
	"testing"

	"github.com/objfuse/objfuse/fusefs/store/memstore"
)

// spans.add agrees with a bitmap of the bytes added, and keeps its spans
// disjoint, apart, not empty and in order, whatever the order of the ranges.
func TestSpansCountWhatWasAdded(t *testing.T) {
	const size = 512
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 1))
		var s spans
		var bits [size]bool
		for range 1 + r.IntN(40) {
			lo := r.Int64N(size)
			hi := lo + r.Int64N(size-lo+1)
			got := s.add(lo, hi)
			var want int64
			for i := range bits {
				bits[i] = bits[i] || (int64(i) >= lo && int64(i) < hi)
				if bits[i] {
					want++
				}
			}
			if got != want {
				t.Fatalf("seed %d: after adding [%d,%d) spans count %d bytes, want %d", seed, lo, hi, got, want)
			}
			for i, x := range s.r {
				if x.lo >= x.hi || (i > 0 && s.r[i-1].hi >= x.lo) {
					t.Fatalf("seed %d: spans %v are not disjoint, apart and in order", seed, s.r)
				}
			}
		}
	}
}

// A part written in more pieces apart than maxSpans is no longer tracked
// (it goes up at the close), and what was kept of it is dropped; one
// written in order is whole and goes up early.
func TestScatteredPartsAreNotTracked(t *testing.T) {
	f, err := New(memstore.New(), Options{PartSize: 5 << 20, StagingDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	file, err := os.CreateTemp(t.TempDir(), "staging")
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	if err := file.Truncate(10 << 20); err != nil {
		t.Fatal(err)
	}
	sp := f.newStagedParts(file)
	defer sp.discard()
	where := func() (string, string, map[string]string, bool) { return "k", "", nil, true }
	for i := range int64(maxSpans + 1) {
		sp.written(i*2*512, 512, where) // part 0, in pieces apart
	}
	for off := int64(5 << 20); off < 10<<20; off += 4096 {
		sp.written(off, 4096, where) // part 1, in order
	}
	sp.mu.Lock() // parts go up meanwhile
	defer sp.mu.Unlock()
	if p := sp.parts[0]; !p.scattered || p.whole || len(p.covered.r) != 0 {
		t.Fatalf("part 0 after %d pieces apart: scattered %v, whole %v, %d spans kept", maxSpans+1, p.scattered, p.whole, len(p.covered.r))
	}
	if p := sp.parts[1]; !p.whole || p.scattered {
		t.Fatalf("part 1 written in order: whole %v, scattered %v", p.whole, p.scattered)
	}
}

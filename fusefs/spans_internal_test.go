package fusefs

import (
	"math/rand/v2"
	"testing"
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

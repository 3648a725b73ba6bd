package fusefs

import "sort"

// spans are disjoint byte ranges, in order: what of a part was written.
type spans struct {
	r []span
	n int64 // bytes covered
}

type span struct{ lo, hi int64 } // [lo, hi)

// add takes in [lo, hi), merging what it overlaps or touches, and returns
// how many bytes the spans cover.
func (s *spans) add(lo, hi int64) int64 {
	if lo >= hi {
		return s.n
	}
	r := s.r
	i := sort.Search(len(r), func(i int) bool { return r[i].hi >= lo })
	j := i
	for ; j < len(r) && r[j].lo <= hi; j++ {
		lo, hi = min(lo, r[j].lo), max(hi, r[j].hi)
		s.n -= r[j].hi - r[j].lo
	}
	s.r = append(r[:i], append([]span{{lo, hi}}, r[j:]...)...)
	s.n += hi - lo
	return s.n
}

// Package seeds reads how long a seeded randomized test searches: which
// seeds (an environment variable of "N" or "N-M") and how many
// operations each, with the defaults CI runs.
package seeds

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// FromEnv returns the seeds variable names ("N" or "N-M"), or def.
func FromEnv(t testing.TB, variable string, def []int64) []int64 {
	t.Helper()
	s := os.Getenv(variable)
	if s == "" {
		return def
	}
	lo, hi, found := strings.Cut(s, "-")
	first, err1 := strconv.ParseInt(lo, 10, 64)
	last, err2 := first, error(nil)
	if found {
		last, err2 = strconv.ParseInt(hi, 10, 64)
	}
	if err1 != nil || err2 != nil || last < first {
		t.Fatalf("%s=%q: want N or N-M", variable, s)
	}
	var seeds []int64
	for s := first; s <= last; s++ {
		seeds = append(seeds, s)
	}
	return seeds
}

// CountFromEnv returns the positive count variable names, or def.
func CountFromEnv(t testing.TB, variable string, def int) int {
	t.Helper()
	s := os.Getenv(variable)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive count", variable, s)
	}
	return n
}

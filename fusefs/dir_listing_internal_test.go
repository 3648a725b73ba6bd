package fusefs

import (
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"testing"
)

// TestAFileWatchTellsShadowedNamesInBoundedMemory: listed as minio-go
// yields a listing (pages of 1,000 keys in key order, each page's objects
// before its prefixes), every directory named as a file listed before it
// is told apart, and a flat directory's names are not all kept.
func TestAFileWatchTellsShadowedNamesInBoundedMemory(t *testing.T) {
	const s3MaxKeys = 1000
	rng := rand.New(rand.NewSource(1))
	keys := map[string]bool{}
	files := map[string]bool{}
	for i := range 5000 {
		base := fmt.Sprintf("n%04d", rng.Intn(3000))
		switch rng.Intn(4) {
		case 0: // a file, and a directory of the same name
			keys[base], keys[base+"/"] = true, true
			files[base] = true
		case 1: // a directory and names that sort between it and its file
			keys[base+"/"] = true
			keys[fmt.Sprintf("%s-%d", base, i)] = true
			keys[base+".txt"] = true
		case 2:
			keys[base] = true
			files[base] = true
		default:
			keys[base+"/"] = true
		}
	}
	// The worst case: file "w" ends a page, and the next holds one name
	// between "w" and "w/", then 997 objects past "w/", and "w/" last of
	// all, yielded after them.
	const worst = "w"
	for len(keys) < 30*s3MaxKeys {
		keys[fmt.Sprintf("a%06d", len(keys))] = true
	}
	keys[worst], keys[worst+"-a"], keys[worst+"/"] = true, true, true
	files[worst] = true
	for i := range s3MaxKeys - 3 {
		keys[fmt.Sprintf("%s%04d", worst, i)] = true
	}
	sorted := slices.Sorted(func(yield func(string) bool) {
		for k := range keys {
			if !yield(k) {
				return
			}
		}
	})
	// Pages end so that "w" is the last key of one.
	at := slices.Index(sorted, worst) + 1
	pages := append(slices.Collect(slices.Chunk(sorted[:at], s3MaxKeys)), slices.Collect(slices.Chunk(sorted[at:], s3MaxKeys))...)
	var w fileWatch
	for _, page := range pages {
		objects, prefixes := []string{}, []string{}
		for _, k := range page {
			if strings.HasSuffix(k, "/") {
				prefixes = append(prefixes, k)
			} else {
				objects = append(objects, k)
			}
		}
		for _, k := range append(objects, prefixes...) {
			w.pass(k)
			name, isPrefix := strings.CutSuffix(k, "/")
			if !isPrefix {
				w.add(name)
				continue
			}
			if got := w.listed(name); got != files[name] {
				t.Fatalf("directory %q: a file of its name listed before it: %v, want %v", name, got, files[name])
			}
		}
	}

	var flat fileWatch
	most := 0
	for i := range 100_000 {
		k := fmt.Sprintf("f%07d", i)
		flat.pass(k)
		flat.add(k)
		most = max(most, len(flat.names))
	}
	if most > listPageKeys+s3MaxKeys {
		t.Fatalf("a flat directory of 100,000 files kept up to %d names, want at most %d", most, listPageKeys+s3MaxKeys)
	}
}

package memstore_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/objfuse/objfuse/fusefs/store/memstore"
)

// TestListIsSortedDelimitedAndStartsAfter: List yields what S3's
// ListObjectsV2 does, for every prefix and start among the keys: keys in
// order, those below a "/" past the prefix rolled up into one prefix each
// (unless recursive), nothing up to and including startAfter; and a key
// deleted while a listing runs is not yielded.
func TestListIsSortedDelimitedAndStartsAfter(t *testing.T) {
	ctx := context.Background()
	st := memstore.New()
	keys := []string{"a", "a.b", "a/", "a/b", "a/b/c", "a/c", "a0", "b/x", "b/y/z", "c"}
	for _, k := range keys {
		if _, err := st.Put(ctx, k, strings.NewReader(""), 0, nil); err != nil {
			t.Fatal(err)
		}
	}
	// want is the listing made the slow way: every key, rolled up, sorted,
	// deduplicated, filtered.
	want := func(prefix, after string, recursive bool) []string {
		var out []string
		for _, k := range keys {
			if !strings.HasPrefix(k, prefix) {
				continue
			}
			if i := strings.IndexByte(k[len(prefix):], '/'); i >= 0 && !recursive {
				k = k[:len(prefix)+i+1]
			}
			if k > after && !slices.Contains(out, k) {
				out = append(out, k)
			}
		}
		slices.Sort(out)
		return out
	}
	for _, prefix := range []string{"", "a", "a/", "b/", "z"} {
		for _, after := range append([]string{""}, keys...) {
			for _, recursive := range []bool{false, true} {
				var got []string
				for e, err := range st.List(ctx, prefix, after, recursive) {
					if err != nil {
						t.Fatal(err)
					}
					got = append(got, e.Name())
				}
				if w := want(prefix, after, recursive); !slices.Equal(got, w) {
					t.Errorf("List(%q, after %q, recursive %v) = %q, want %q", prefix, after, recursive, got, w)
				}
			}
		}
	}
	var got []string
	for e, err := range st.List(ctx, "", "", true) {
		if err != nil {
			t.Fatal(err)
		}
		if e.Name() == "a" {
			st.Delete(ctx, "c")
		}
		got = append(got, e.Name())
	}
	if slices.Contains(got, "c") {
		t.Errorf("a key deleted during the listing was listed: %q", got)
	}
}

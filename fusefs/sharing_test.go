package fusefs_test

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/objfuse/objfuse/fusefs"
)

// Close-to-open across mounts, with the bound README states: an open()
// on one mount that starts more than StatTTL + ListTTL after a close()
// on another returned sees what that close left (a changed or removed
// file), and more than 2 × ListTTL after it for a new name. The other
// mount's caches (the kernel's entries and attributes, its listing, its
// page cache) are filled just before each change, so that each is as
// stale as it can be when the bound has passed.
func TestCloseToOpenAcrossMounts(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			st := b.fresh(t)
			opts := fusefs.Options{StatTTL: 300 * time.Millisecond, ListTTL: 200 * time.Millisecond}
			changed, added := opts.StatTTL+opts.ListTTL, 2*opts.ListTTL
			here, there := mountFS(t, st, opts), mountFS(t, st, opts)
			write := func(name string, data []byte) time.Time {
				t.Helper()
				if err := os.WriteFile(filepath.Join(here, name), data, 0o644); err != nil {
					t.Fatal(err)
				}
				return time.Now()
			}
			// prime fills the other mount's caches of name.
			prime := func(name string) {
				t.Helper()
				if _, err := os.ReadDir(there); err != nil {
					t.Fatal(err)
				}
				os.Stat(filepath.Join(there, name))
				os.ReadFile(filepath.Join(there, name))
			}
			readThere := func(name string) ([]byte, error) { return os.ReadFile(filepath.Join(there, name)) }

			v1 := []byte("version one")
			write("f", v1)
			eventually(t, time.Minute, "the other mount to see f", func() bool {
				got, err := readThere("f")
				return err == nil && bytes.Equal(got, v1)
			})

			prime("f")
			v2 := []byte("version two, longer than the first")
			waitPast(write("f", v2).Add(changed))
			if got, err := readThere("f"); err != nil || !bytes.Equal(got, v2) {
				t.Fatalf("a changed file %v after its close: %q, %v; want %q", changed, got, err, v2)
			}

			prime("g")
			waitPast(write("g", v1).Add(added))
			if got, err := readThere("g"); err != nil || !bytes.Equal(got, v1) {
				t.Fatalf("a new file %v after its close: %q, %v; want %q", added, got, err, v1)
			}

			prime("f")
			if err := os.Remove(filepath.Join(here, "f")); err != nil {
				t.Fatal(err)
			}
			waitPast(time.Now().Add(changed))
			if _, err := os.Stat(filepath.Join(there, "f")); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("a removed file %v after: %v, want ENOENT", changed, err)
			}
		})
	}
}

// waitPast waits until t has passed. The bound under test is a time:
// there is nothing to poll for before it.
func waitPast(t time.Time) { <-time.After(time.Until(t) + time.Millisecond) }

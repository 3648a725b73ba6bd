package fusefs_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/objfuse/objfuse/fusefs"
)

// A chmod of a directory rewrites its marker object with the new mode and
// keeps the marker's other metadata: on a prefix volume's root that is
// the driver's record of the volume (its size, which an expansion
// changes), and elsewhere another tool's.
func TestChmodKeepsAMarkersOtherMetadata(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			st := b.fresh(t)
			ctx := context.Background()
			record := map[string]string{"objfuse-capacity": "4194304", "objfuse-volume-name": "pvc-1"}
			for _, key := range []string{"vol/", "vol/sub/"} {
				if _, err := st.Put(ctx, key, bytes.NewReader(nil), 0, record); err != nil {
					t.Fatal(err)
				}
			}
			mnt := mountFS(t, st, fusefs.Options{Prefix: "vol/"})
			for _, dir := range []string{mnt, filepath.Join(mnt, "sub")} {
				if err := os.Chmod(dir, 0o705); err != nil {
					t.Fatal(err)
				}
			}
			for _, key := range []string{"vol/", "vol/sub/"} {
				o, err := st.Head(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				for k, v := range record {
					if o.Metadata[k] != v {
						t.Errorf("after chmod, %s has %s=%q, want %q (metadata %v)", key, k, o.Metadata[k], v, o.Metadata)
					}
				}
				if o.Metadata["mode"] != "16837" { // S_IFDIR|0705
					t.Errorf("after chmod, %s has mode %q", key, o.Metadata["mode"])
				}
			}
		})
	}
}

// A renamed directory's marker keeps another tool's metadata (as a
// server-side copy would), and its own attributes.
func TestRenameKeepsAMarkersOtherMetadata(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			st := b.fresh(t)
			ctx := context.Background()
			mnt := mountFS(t, st, fusefs.Options{Prefix: "vol/"})
			if err := os.Mkdir(filepath.Join(mnt, "old"), 0o750); err != nil {
				t.Fatal(err)
			}
			o, err := st.Head(ctx, "vol/old/")
			if err != nil {
				t.Fatal(err)
			}
			meta := o.Metadata
			meta["other-tool"] = "kept"
			if _, err := st.Put(ctx, "vol/old/", bytes.NewReader(nil), 0, meta); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(mnt, "old", "f"), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(filepath.Join(mnt, "old"), filepath.Join(mnt, "new")); err != nil {
				t.Fatal(err)
			}
			got, err := st.Head(ctx, "vol/new/")
			if err != nil {
				t.Fatal(err)
			}
			if got.Metadata["other-tool"] != "kept" || got.Metadata["mode"] != meta["mode"] {
				t.Errorf("the renamed marker's metadata %v, want other-tool=kept and mode %s", got.Metadata, meta["mode"])
			}
		})
	}
}

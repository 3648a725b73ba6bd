package fusefs_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/objfuse/objfuse/fusefs"
	"github.com/objfuse/objfuse/fusefs/store"
	"github.com/objfuse/objfuse/fusefs/store/memstore"
	"github.com/objfuse/objfuse/fusefs/store/s3store"
)

// A file streamed past nine tenths of S3's part count goes on in larger
// parts, spooled on disk, instead of stopping at parts × PartSize (78 GiB
// with 8 MiB parts). At the last part S3 allows, a write is short and
// the next one is EFBIG; what was written is stored whole. With S3's
// limit lowered to 20 parts of 5 MiB: 18 of 5 MiB, then 10 and 20 MiB,
// or less when the staging limit is small.
func TestStreamGrowsItsPartsPastS3sPartCount(t *testing.T) {
	const mib = 1 << 20
	const capacity = 18*5*mib + 10*mib + 20*mib
	tests := []struct {
		name    string
		staging int64 // the staging limit, if not the default
		write   int   // bytes the test tries to write
		stored  int
		parts   int
	}{
		{"ends in a spooled part", 0, 95*mib + 123, 95*mib + 123, 19},
		{"fills every part S3 allows", 0, capacity + mib, capacity, 20},
		// A stream's spool takes at most half the staging limit, over
		// three parts (two in flight, one filling): 10 MiB parts here.
		{"a small staging limit caps the parts", 60 * mib, capacity, 18*5*mib + 2*10*mib, 20},
	}
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					st := b.fresh(t)
					f, dir := mountFSOf(t, st, fusefs.Options{Concurrency: 2, StagingLimit: tc.staging})
					fusefs.SetMaxParts(f, 20)
					h, err := os.Create(filepath.Join(dir, "big"))
					if err != nil {
						t.Fatal(err)
					}
					data := randomBytes(tc.write)
					var written int
					var werr error
					for written < len(data) && werr == nil {
						var k int
						k, werr = h.Write(data[written:min(written+mib, len(data))])
						written += k
					}
					if tc.stored < tc.write {
						wantErrno(t, "a write past the last part S3 allows", werr, syscall.EFBIG)
					} else if werr != nil {
						t.Fatalf("write: %v", werr)
					}
					if written != tc.stored {
						t.Errorf("wrote %d bytes, want %d", written, tc.stored)
					}
					if err := h.Close(); err != nil {
						t.Fatalf("close: %v", err)
					}
					sameBytes(t, "stored", stored(t, st, "big"), data[:tc.stored])
					if n := fusefs.StagedBytes(f); n != 0 {
						t.Errorf("staging files still take %d bytes after close", n)
					}
					storedInParts(t, st, "big", tc.parts)
				})
			}
		})
	}
}

// storedInParts fails the test unless key went up in an upload of
// parts, where the store says (an S3 ETag ends in its part count).
func storedInParts(t *testing.T, st store.Store, key string, parts int) {
	t.Helper()
	s3, ok := st.(*s3store.Store)
	if !ok {
		return
	}
	info, err := s3.Client().StatObject(t.Context(), s3.Bucket(), key, minio.StatObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(info.ETag, "-"+strconv.Itoa(parts)) {
		t.Errorf("ETag %s: want an upload of %d parts", info.ETag, parts)
	}
}

// A file stored in parts has the mtime its upload began with (S3 fixes a
// multipart upload's metadata then): the mount says that one once the
// file is stored, not the time of its close, so that it does not change
// when the file is looked up again, nor differ in a snapshot or on
// another mount. The close is made to fall in a later second. A file
// truncated and written anew has the time of its writing, not its old
// version's; a mtime set while it streamed (cp -p sets it before its
// close) is stored with it.
func TestAFileStoredInPartsKeepsItsStoredMtime(t *testing.T) {
	const part = 5 << 20
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		name     string
		existing bool      // an older version is truncated (O_TRUNC)
		setTo    time.Time // set between the parts, unless zero
	}{
		{"new", false, time.Time{}},
		{"truncated", true, time.Time{}},
		{"set while streamed", false, old},
	} {
		t.Run(c.name, func(t *testing.T) {
			mem := memstore.New()
			dir := mountFS(t, mem, fusefs.Options{PartSize: part})
			path := filepath.Join(dir, "large")
			if c.existing {
				if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Chtimes(path, old, old); err != nil {
					t.Fatal(err)
				}
			}
			began := time.Now().Unix()
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			chunk := make([]byte, part+1)
			if _, err := f.Write(chunk); err != nil { // the first part is sent
				t.Fatal(err)
			}
			// The close falls in a later second than the first part.
			sent := time.Now().Unix()
			eventually(t, 2*time.Second, "the next second", func() bool { return time.Now().Unix() > sent })
			if !c.setTo.IsZero() {
				if err := os.Chtimes(path, c.setTo, c.setTo); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := f.Write(chunk); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			o, err := mem.Head(context.Background(), "large")
			if err != nil {
				t.Fatal(err)
			}
			got := fi.ModTime().Unix()
			if stored := o.Metadata["mtime"]; strconv.FormatInt(got, 10) != stored {
				t.Fatalf("the mount says mtime %d, the object holds %s", got, stored)
			}
			switch {
			case !c.setTo.IsZero() && got != c.setTo.Unix():
				t.Fatalf("mtime %d, want the one set while the file streamed, %d", got, c.setTo.Unix())
			case c.setTo.IsZero() && got < began:
				t.Fatalf("mtime %d, before the file was written (%d)", got, began)
			}
		})
	}
}

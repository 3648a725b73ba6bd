package fusefs_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/objfuse/objfuse/fusefs"
	"github.com/objfuse/objfuse/fusefs/store/s3store"
	"github.com/objfuse/objfuse/test/miniotest"
)

// A file whose bytes change on their way to S3 is not acknowledged: its
// close fails and the bucket holds none of the changed bytes, whether it
// went up in one PUT, as parts while being written, or from a staging
// file (one PUT, or parts past the store's part size).
func TestCorruptedUploadFailsClose(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	cfg, corrupted := srv.CorruptingFront(t)
	cfg.MaxRetries = 1
	st, err := s3store.New(cfg, bucket)
	if err != nil {
		t.Fatal(err)
	}
	dir := mountFS(t, st, fusefs.Options{})
	cases := []struct {
		name  string
		size  int64
		write func(f *os.File) error
	}{
		{"small", 4096, func(f *os.File) error { _, err := f.Write(randomBytes(4096)); return err }},
		{"streamed", 12 << 20, func(f *os.File) error {
			for range 12 {
				if _, err := f.Write(randomBytes(1 << 20)); err != nil {
					return err
				}
			}
			return nil
		}},
		{"staged", 2 << 20, func(f *os.File) error { _, err := f.WriteAt(randomBytes(1<<20), 1<<20); return err }},
		{"staged-parts", 17 << 20, func(f *os.File) error { _, err := f.WriteAt(randomBytes(1<<20), 16<<20); return err }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := corrupted.Load()
			f, err := os.Create(filepath.Join(dir, c.name))
			if err != nil {
				t.Fatal(err)
			}
			writeErr := c.write(f)
			closeErr := f.Close()
			if writeErr == nil && closeErr == nil {
				t.Error("a file whose upload was corrupted closed without error")
			}
			if corrupted.Load() == before {
				t.Fatal("the proxy changed no upload")
			}
			info, err := srv.Client().StatObject(t.Context(), bucket, c.name, minio.StatObjectOptions{})
			if err == nil && info.Size == c.size {
				t.Errorf("the corrupted upload was stored (%d bytes)", info.Size)
			}
		})
	}
}

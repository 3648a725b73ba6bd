package fusefs_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/objfuse/objfuse/fusefs"
	"github.com/objfuse/objfuse/fusefs/store"
	"github.com/objfuse/objfuse/fusefs/store/s3store"
	"github.com/objfuse/objfuse/test/miniotest"
)

// TestMinioStopsMidWrite: the server dies while a large file is being
// written. close must fail, no partial object may appear, and once the
// server is back the same mount works again.
func TestMinioStopsMidWrite(t *testing.T) {
	for _, sync := range []string{"close", "fsync"} {
		t.Run(sync, func(t *testing.T) {
			srv := miniotest.Start(t)
			bucket := srv.Bucket()
			st, err := s3store.New(srv.Config(), bucket)
			if err != nil {
				t.Fatal(err)
			}
			dir := mountFS(t, st, fusefs.Options{})
			f, err := os.Create(filepath.Join(dir, "big"))
			if err != nil {
				t.Fatal(err)
			}
			chunk := randomBytes(1 << 20)
			for range 12 { // two 5 MiB parts go up
				if _, err := f.Write(chunk); err != nil {
					t.Fatal(err)
				}
			}
			srv.Stop()
			// Writes may or may not fail now (they are buffered); the
			// acknowledgement is close or fsync, and that must fail.
			for range 12 {
				if _, err := f.Write(chunk); err != nil {
					break
				}
			}
			var syncErr error
			if sync == "fsync" {
				syncErr = f.Sync()
			}
			closeErr := f.Close()
			if sync == "fsync" && syncErr == nil {
				t.Fatal("fsync succeeded with the server down")
			}
			if sync == "close" && closeErr == nil {
				t.Fatal("close succeeded with the server down")
			}
			srv.Restart()
			if _, err := st.Head(context.Background(), "big"); !errors.Is(err, store.ErrNotExist) {
				t.Fatalf("after a failed upload the object must not exist: %v", err)
			}
			// No multipart upload is left either.
			// The abort that failed while the server was down is retried,
			// so no incomplete upload lingers either.
			core := minio.Core{Client: srv.Client()}
			eventually(t, 30*time.Second, "the failed upload to be aborted", func() bool {
				res, err := core.ListMultipartUploads(context.Background(), bucket, "big", "", "", "", 10)
				return err == nil && len(res.Uploads) == 0
			})
			// The mount works again without remounting.
			eventually(t, 30*time.Second, "writes to work again", func() bool {
				return os.WriteFile(filepath.Join(dir, "after"), []byte("back"), 0o644) == nil
			})
			sameBytes(t, "after restart", stored(t, st, "after"), []byte("back"))
			if _, err := os.ReadDir(dir); err != nil {
				t.Fatalf("readdir after restart: %v", err)
			}
		})
	}
}

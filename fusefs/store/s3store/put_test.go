package s3store_test

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/objfuse/objfuse/fusefs/store/s3store"
	"github.com/objfuse/objfuse/test/miniotest"
)

const testPartSize = 5 << 20 // S3's smallest part

// Put stores the same bytes whatever the size (one request up to a part,
// parts above) and whatever the reader (in memory, a staging file, or a
// stream that cannot seek), with its metadata.
func TestPutStoresEveryReaderAndSize(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	cfg := srv.Config()
	cfg.PartSize, cfg.Concurrency = testPartSize, 2
	st, err := s3store.New(cfg, bucket)
	if err != nil {
		t.Fatal(err)
	}
	readers := map[string]func(t *testing.T, data []byte) io.Reader{
		"memory": func(t *testing.T, data []byte) io.Reader { return bytes.NewReader(data) },
		"file": func(t *testing.T, data []byte) io.Reader {
			path := filepath.Join(t.TempDir(), "staging")
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
			return io.NewSectionReader(f, 0, int64(len(data)))
		},
		"stream": func(t *testing.T, data []byte) io.Reader { return io.MultiReader(bytes.NewReader(data)) },
	}
	for _, size := range []int{0, 1, 4096, testPartSize, testPartSize + 1, 3*testPartSize + testPartSize/2} {
		for name, reader := range readers {
			data := make([]byte, size)
			rand.Read(data)
			key := fmt.Sprintf("%s/%d", name, size)
			o, err := st.Put(t.Context(), key, reader(t, data), int64(size), map[string]string{"mode": "33188"})
			if err != nil {
				t.Fatalf("%s, %d bytes: %v", name, size, err)
			}
			if o.ETag == "" {
				t.Errorf("%s, %d bytes: no ETag", name, size)
			}
			obj, err := srv.Client().GetObject(t.Context(), bucket, key, minio.GetObjectOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(obj)
			obj.Close()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, data) {
				t.Errorf("%s, %d bytes: stored %d bytes that differ", name, size, len(got))
			}
			info, err := srv.Client().StatObject(t.Context(), bucket, key, minio.StatObjectOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if info.UserMetadata["Mode"] != "33188" {
				t.Errorf("%s, %d bytes: metadata %v", name, size, info.UserMetadata)
			}
		}
	}
}

// A body changed on its way to the server is refused, not stored: every
// PUT carries a checksum of what the client meant to send. Without it an
// unsigned payload on plain HTTP would be stored as it arrived.
func TestCorruptedBodyIsRefused(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	cfg, corrupted := srv.CorruptingFront(t)
	cfg.PartSize, cfg.Concurrency = testPartSize, 2
	cfg.MaxRetries = 1
	st, err := s3store.New(cfg, bucket)
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range []int{4096, 2*testPartSize + 7} {
		data := make([]byte, size)
		rand.Read(data)
		before := corrupted.Load()
		if _, err := st.Put(t.Context(), "obj", bytes.NewReader(data), int64(size), nil); err == nil {
			t.Errorf("%d bytes: a corrupted upload succeeded", size)
		}
		if corrupted.Load() == before {
			t.Fatalf("%d bytes: the proxy changed no request", size)
		}
		if _, err := srv.Client().StatObject(t.Context(), bucket, "obj", minio.StatObjectOptions{}); err == nil {
			t.Errorf("%d bytes: an object was stored", size)
		}
	}
	for u := range srv.Client().ListIncompleteUploads(t.Context(), bucket, "", true) {
		t.Errorf("multipart upload %s of %q left behind (err %v)", u.UploadID, u.Key, u.Err)
	}
}

package s3store_test

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/objfuse/objfuse/fusefs/store"
	"github.com/objfuse/objfuse/fusefs/store/s3store"
	"github.com/objfuse/objfuse/test/miniotest"
)

const testPartSize = 5 << 20 // S3's smallest part

// partStore is a store of bucket with the smallest parts, two in flight,
// so that tests cross part boundaries cheaply.
func partStore(t *testing.T, cfg s3store.Config, bucket string) *s3store.Store {
	t.Helper()
	cfg.PartSize, cfg.Concurrency = testPartSize, 2
	st, err := s3store.New(cfg, bucket)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// stagedFile is data in a file on disk, read as objfuse reads a staging
// file.
func stagedFile(t *testing.T, data []byte) io.Reader {
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
}

// Put stores the same bytes whatever the size (one request up to a part,
// parts above) and whatever the reader (in memory, a staging file, or a
// stream that cannot seek), with its metadata.
func TestPutStoresEveryReaderAndSize(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	st := partStore(t, srv.Config(), bucket)
	readers := map[string]func(t *testing.T, data []byte) io.Reader{
		"memory": func(t *testing.T, data []byte) io.Reader { return bytes.NewReader(data) },
		"file":   stagedFile,
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
	cfg.MaxRetries = 1
	st := partStore(t, cfg, bucket)
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

// A Put that cannot read its body, or whose size needs more parts than
// S3 allows, fails with nothing left in the bucket: no object and no
// incomplete upload.
func TestPutFailsCleanly(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	st := partStore(t, srv.Config(), bucket)
	data := make([]byte, 3*testPartSize)
	rand.Read(data)
	broken := errors.New("disk gone")
	cases := []struct {
		name string
		r    io.Reader
		size int64
	}{
		{"stream fails in the second part", io.MultiReader(bytes.NewReader(data[:testPartSize+10]), errReader{broken}), int64(len(data))},
		{"file fails in the third part", &failingReaderAt{data: data, failFrom: 2*testPartSize + 1, err: broken}, int64(len(data))},
		{"small body short", io.MultiReader(bytes.NewReader(data[:10])), 4096},
		{"more parts than S3 allows", errReader{errors.New("read")}, int64(store.MaxParts+1) * testPartSize},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := st.Put(t.Context(), "obj", c.r, c.size, nil); err == nil {
				t.Fatal("Put succeeded")
			}
			if _, err := srv.Client().StatObject(t.Context(), bucket, "obj", minio.StatObjectOptions{}); err == nil {
				t.Error("an object was stored")
			}
			for u := range srv.Client().ListIncompleteUploads(t.Context(), bucket, "", true) {
				t.Errorf("multipart upload %s of %q left behind (err %v)", u.UploadID, u.Key, u.Err)
			}
		})
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// failingReaderAt is a file whose bytes from failFrom on cannot be read.
type failingReaderAt struct {
	data     []byte
	failFrom int64
	err      error
}

func (f *failingReaderAt) Read([]byte) (int, error) { return 0, errors.New("read, not ReadAt") }

func (f *failingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) > f.failFrom {
		return 0, f.err
	}
	return copy(p, f.data[off:]), nil
}

// A staged file larger than S3's part count times PartSize goes up in
// larger parts instead of failing: with the limit lowered to 4 parts,
// 22 MiB goes as 4 parts of 6 MiB (5.5 rounded up to whole MiB).
func TestPutGrowsPartsPastS3sPartCount(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	st := partStore(t, srv.Config(), bucket)
	s3store.SetMaxParts(st, 4)
	data := make([]byte, 22<<20)
	rand.Read(data)
	if _, err := st.Put(t.Context(), "big", stagedFile(t, data), int64(len(data)), nil); err != nil {
		t.Fatalf("put 22 MiB in at most 4 parts: %v", err)
	}
	info, err := srv.Client().StatObject(t.Context(), bucket, "big", minio.StatObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(info.ETag, "-4") || info.Size != int64(len(data)) {
		t.Errorf("stored %d bytes with ETag %s, want %d bytes in 4 parts", info.Size, info.ETag, len(data))
	}
	obj, err := srv.Client().GetObject(t.Context(), bucket, "big", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	if got, err := io.ReadAll(obj); err != nil || !bytes.Equal(got, data) {
		t.Errorf("stored bytes differ (%v)", err)
	}
}

// A server that works a while before it answers (a large multipart
// completion on a server that sends no keep-alive spaces) is not cut by
// the stall timeout once the request's body is sent: its answer gets
// four times as long.
func TestSlowAnswerIsNotCut(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	target, _ := url.Parse(srv.Endpoint)
	proxy := httputil.NewSingleHostReverseProxy(target)
	const stall = time.Second
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			body, _ := io.ReadAll(r.Body) // all of it: the client waits for the answer now
			r.Body = io.NopCloser(bytes.NewReader(body))
			<-time.After(5 * stall / 2) // the server at work: longer than the stall timeout
		}
		proxy.ServeHTTP(w, r)
	}))
	defer front.Close()
	cfg := srv.Config()
	cfg.Endpoint, cfg.StallTimeout, cfg.NoBatching = front.URL, stall, true
	st, err := s3store.New(cfg, bucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(t.Context(), "slow", bytes.NewReader([]byte("slow answer")), 11, nil); err != nil {
		t.Fatalf("put answered after %v with a stall timeout of %v: %v", 5*stall/2, stall, err)
	}
}

package s3store_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/objfuse/objfuse/fusefs/store"
	"github.com/objfuse/objfuse/fusefs/store/s3store"
	"github.com/objfuse/objfuse/test/miniotest"
	"github.com/objfuse/objfuse/test/versitytest"
)

// A GET for a version the object no longer is fails with ErrChanged, on
// every read path: ranged (spliced over plain HTTP), from the start, and
// the whole object; a GET for the version it is reads it.
func TestGetOfAReplacedVersionIsRefused(t *testing.T) {
	for name, start := range servers {
		t.Run(name, func(t *testing.T) {
			v1, v2 := bytes.Repeat([]byte("1"), 100), bytes.Repeat([]byte("2"), 100)
			st, o1, o2 := replaced(t, start, v1, v2)
			for _, r := range []struct{ off, n int64 }{{10, 20}, {0, 20}, {0, -1}} {
				if body, err := st.Get(t.Context(), "obj", o1.ETag, r.off, r.n); !errors.Is(err, store.ErrChanged) {
					if err == nil {
						body.Close()
					}
					t.Errorf("get [%d,+%d) of the replaced version: %v, want ErrChanged", r.off, r.n, err)
				}
				body, err := st.Get(t.Context(), "obj", o2.ETag, r.off, r.n)
				if err != nil {
					t.Fatalf("get [%d,+%d) of the current version: %v", r.off, r.n, err)
				}
				got, err := io.ReadAll(body)
				body.Close()
				want := v2[r.off:]
				if r.n >= 0 {
					want = want[:r.n]
				}
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("get [%d,+%d) of the current version: %q, %v", r.off, r.n, got, err)
				}
			}
		})
	}
}

// servers start each S3 server the version tests run on.
var servers = map[string]func(t *testing.T) (s3store.Config, string){
	"minio": func(t *testing.T) (s3store.Config, string) {
		srv := miniotest.Start(t)
		return srv.Config(), srv.NewBucket(t)
	},
	"versitygw": func(t *testing.T) (s3store.Config, string) {
		srv, stop, err := versitytest.StartShared()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stop)
		return srv.Config(), srv.NewBucket(t)
	},
}

// A put conditional on a version another writer replaced stores nothing
// and fails with ErrChanged, in one request and as a multipart upload;
// on the version there, it stores.
func TestPutIfMatchOfAReplacedVersionIsRefused(t *testing.T) {
	for name, start := range servers {
		t.Run(name, func(t *testing.T) {
			cfg, bucket := start(t)
			cfg.PartSize = 5 << 20
			st, err := s3store.New(cfg, bucket)
			if err != nil {
				t.Fatal(err)
			}
			for _, size := range []int{100, 6 << 20} {
				v1, v2, mine := bytes.Repeat([]byte("1"), size), bytes.Repeat([]byte("2"), size), bytes.Repeat([]byte("m"), size)
				o1, err := st.Put(t.Context(), "obj", bytes.NewReader(v1), int64(size), nil)
				if err != nil {
					t.Fatal(err)
				}
				o2, err := st.Put(t.Context(), "obj", bytes.NewReader(v2), int64(size), nil)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := st.PutIfMatch(t.Context(), "obj", o1.ETag, bytes.NewReader(mine), int64(size), nil); !errors.Is(err, store.ErrChanged) {
					t.Fatalf("%d bytes put on the replaced version: %v, want ErrChanged", size, err)
				}
				if got := getAll(t, st, "obj"); !bytes.Equal(got, v2) {
					t.Fatalf("%d bytes: the refused put changed the object", size)
				}
				if _, err := st.PutIfMatch(t.Context(), "obj", o2.ETag, bytes.NewReader(mine), int64(size), nil); err != nil {
					t.Fatalf("%d bytes put on the version there: %v", size, err)
				}
				if got := getAll(t, st, "obj"); !bytes.Equal(got, mine) {
					t.Fatalf("%d bytes: the put on the version there did not store", size)
				}
			}
		})
	}
}

func getAll(t *testing.T, st store.Store, key string) []byte {
	t.Helper()
	body, err := st.Get(t.Context(), key, store.AnyVersion, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer body.Close()
	b, err := io.ReadAll(body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A server (or proxy) that ignores If-Match and sends another version's
// bytes is caught by the answer's ETag: ErrChanged, not those bytes.
func TestIgnoredIfMatchIsCaught(t *testing.T) {
	data := bytes.Repeat([]byte("x"), 100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Last-Modified", time.Now().UTC().Format(http.TimeFormat))
		w.Header().Set("ETag", `"now"`)
		body, status := data, http.StatusOK
		if r.Header.Get("Range") != "" {
			body, status = data[10:30], http.StatusPartialContent
			w.Header().Set("Content-Range", "bytes 10-29/100")
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(status)
		w.Write(body)
	}))
	defer srv.Close()
	cfg := s3store.Config{Endpoint: srv.URL, Region: "us-east-1", PathStyle: true, MaxRetries: 1,
		Keys: &s3store.Keys{AccessKeyID: "k", SecretAccessKey: "secret"}}
	st, err := s3store.New(cfg, "bkt")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct{ off, n int64 }{{10, 20}, {0, -1}} {
		if body, err := st.Get(t.Context(), "obj", "then", r.off, r.n); !errors.Is(err, store.ErrChanged) {
			if err == nil {
				body.Close()
			}
			t.Errorf("get [%d,+%d) of version \"then\" answered by version \"now\": %v, want ErrChanged", r.off, r.n, err)
		}
	}
}

// A conditional PUT whose reply was lost after the server stored it is
// retried, is refused (the object is no longer the version it named),
// and recognises the version there as its own: stored, not a conflict.
func TestPutIfMatchWhoseReplyWasLost(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	var puts atomic.Int32
	cfg, lost := srv.ReplyLosingFront(t, func(r *http.Request) bool {
		// The single PUT, or the completion of a multipart upload.
		last := r.Method == http.MethodPut && !r.URL.Query().Has("partNumber") || r.Method == http.MethodPost && r.URL.Query().Has("uploadId")
		return last && r.Header.Get("If-Match") != "" && puts.Add(1) == 1
	})
	cfg.PartSize = 5 << 20
	st, err := s3store.New(cfg, bucket)
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range []int{100, 11 << 20} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			puts.Store(0)
			lost.Store(0)
			putIfMatchWhoseReplyWasLost(t, st, size, lost, &puts)
		})
	}
}

func putIfMatchWhoseReplyWasLost(t *testing.T, st *s3store.Store, size int, lost, puts *atomic.Int32) {
	v1, v2 := bytes.Repeat([]byte("1"), size), bytes.Repeat([]byte("2"), size)
	o1, err := st.Put(t.Context(), "obj", bytes.NewReader(v1), int64(len(v1)), nil)
	if err != nil {
		t.Fatal(err)
	}
	o2, err := st.PutIfMatch(t.Context(), "obj", o1.ETag, bytes.NewReader(v2), int64(len(v2)), nil)
	if err != nil {
		t.Fatalf("conditional put whose reply was lost: %v", err)
	}
	if lost.Load() != 1 || puts.Load() < 2 {
		t.Fatalf("%d replies lost, %d conditional puts sent: the case was not made", lost.Load(), puts.Load())
	}
	now, err := st.Head(t.Context(), "obj")
	if err != nil || now.ETag != o2.ETag || now.Size != int64(len(v2)) {
		t.Fatalf("stored %+v (%v), put returned %+v", now, err, o2)
	}
	// Bytes of the same size that differ are another writer's: refused.
	v3 := bytes.Repeat([]byte("3"), size)
	if _, err := st.PutIfMatch(t.Context(), "obj", o1.ETag, bytes.NewReader(v3), int64(len(v3)), nil); !errors.Is(err, store.ErrChanged) {
		t.Fatalf("put on a replaced version: %v, want ErrChanged", err)
	}
}

// A ranged GET of a version, past the end of the shorter version that
// replaced it, is refused as a changed object, not as a bad range: the
// range was right for the version asked for.
func TestRangePastAShorterVersionIsAChange(t *testing.T) {
	for name, start := range servers {
		t.Run(name, func(t *testing.T) {
			st, o1, _ := replaced(t, start, bytes.Repeat([]byte("1"), 100), []byte("2"))
			if _, err := st.Get(t.Context(), "obj", o1.ETag, 50, 10); !errors.Is(err, store.ErrChanged) {
				t.Fatalf("get of v1's bytes 50-59 once v2 (1 byte) replaced it: %v, want ErrChanged", err)
			}
		})
	}
}

// replaced puts v1, then v2, as "obj" on a new store of the server start
// gives, and returns the store and both versions.
func replaced(t *testing.T, start func(t *testing.T) (s3store.Config, string), v1, v2 []byte) (*s3store.Store, store.Object, store.Object) {
	t.Helper()
	cfg, bucket := start(t)
	st, err := s3store.New(cfg, bucket)
	if err != nil {
		t.Fatal(err)
	}
	var o [2]store.Object
	for i, v := range [][]byte{v1, v2} {
		if o[i], err = st.Put(t.Context(), "obj", bytes.NewReader(v), int64(len(v)), nil); err != nil {
			t.Fatal(err)
		}
	}
	if o[0].ETag == "" || o[0].ETag == o[1].ETag {
		t.Fatalf("ETags %q and %q: the test needs two", o[0].ETag, o[1].ETag)
	}
	return st, o[0], o[1]
}

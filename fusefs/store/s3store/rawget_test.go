package s3store_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"golang.org/x/sys/unix"

	"github.com/objfuse/objfuse/fusefs/store"
	"github.com/objfuse/objfuse/fusefs/store/s3store"
	"github.com/objfuse/objfuse/test/miniotest"
)

// rawStore is a Store on a fresh MinIO with one object of size random
// bytes; minio-go does not retry failed requests.
func rawStore(t *testing.T, size int) (*s3store.Store, []byte) {
	t.Helper()
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	data := make([]byte, size)
	rand.Read(data)
	if _, err := srv.Client().PutObject(t.Context(), bucket, "obj", bytes.NewReader(data), int64(size), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := srv.Config()
	cfg.MaxRetries = 1 // so that the transport's own retry is what is tested
	st, err := s3store.New(cfg, bucket)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Splices() {
		t.Fatal("a plain-HTTP endpoint does not splice")
	}
	return st, data
}

// spliceAll moves a body through a pipe with SpliceTo and returns what
// came out of the pipe, and SpliceTo's first error other than io.EOF.
func spliceAll(t *testing.T, body io.Reader) ([]byte, error) {
	t.Helper()
	src, ok := body.(store.PipeSource)
	if !ok {
		t.Fatalf("a ranged GET's body %T cannot splice", body)
	}
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	out := make(chan []byte)
	go func() {
		defer unix.Close(fds[0])
		var got []byte
		buf := make([]byte, 64<<10)
		for {
			n, err := unix.Read(fds[0], buf)
			if n <= 0 || err != nil {
				out <- got
				return
			}
			got = append(got, buf[:n]...)
		}
	}()
	var err error
	for err == nil {
		_, err = src.SpliceTo(fds[1], 1<<20)
	}
	unix.Close(fds[1])
	if err == io.EOF {
		err = nil
	}
	return <-out, err
}

// A ranged GET's body splices from the socket into a pipe, exact bytes,
// and a body read to its end leaves its connection for the next GET.
func TestRangedGetSplicesAndKeepsTheConnection(t *testing.T) {
	st, data := rawStore(t, 3<<20)
	for i, r := range []struct{ off, n int64 }{{1000, 2 << 20}, {0, 3 << 20}, {3<<20 - 10, 10}} {
		body, err := st.Get(t.Context(), "obj", store.AnyVersion, r.off, r.n)
		if err != nil {
			t.Fatal(err)
		}
		got, err := spliceAll(t, body)
		body.Close()
		if err != nil || !bytes.Equal(got, data[r.off:r.off+r.n]) {
			t.Fatalf("GET %d: %d bytes, equal %v, err %v", i, len(got), bytes.Equal(got, data[r.off:r.off+r.n]), err)
		}
		if n := s3store.IdleRawConns(st); n != 1 {
			t.Fatalf("after GET %d: %d kept connections, want the same one", i, n)
		}
	}
	// Read (copying) works on the same bodies.
	body, err := st.Get(t.Context(), "obj", store.AnyVersion, 5, 100)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(body)
	body.Close()
	if err != nil || !bytes.Equal(got, data[5:105]) {
		t.Fatalf("Read: %d bytes, %v", len(got), err)
	}
}

// A body closed before its end takes its connection with it (the rest of
// the body is still on it), and the next GET gets a new one.
func TestEarlyCloseDropsTheConnection(t *testing.T) {
	st, data := rawStore(t, 4<<20)
	body, err := st.Get(t.Context(), "obj", store.AnyVersion, 0, 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(body, make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	body.Close()
	if n := s3store.IdleRawConns(st); n != 0 {
		t.Fatalf("%d kept connections after an early close", n)
	}
	body, err = st.Get(t.Context(), "obj", store.AnyVersion, 10, 10)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(body)
	body.Close()
	if err != nil || !bytes.Equal(got, data[10:20]) {
		t.Fatalf("next GET: %q, %v", got, err)
	}
}

// A kept connection the server closed meanwhile fails on first use; the
// GET goes again on a new connection instead of failing.
func TestGetRetriesAConnectionTheServerClosed(t *testing.T) {
	st, data := rawStore(t, 1<<20)
	for i := range 3 {
		body, err := st.Get(t.Context(), "obj", store.AnyVersion, 0, 1<<20)
		if err != nil {
			t.Fatalf("GET %d: %v", i, err)
		}
		got, err := io.ReadAll(body)
		body.Close()
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("GET %d: %d bytes, %v", i, len(got), err)
		}
		s3store.HalfCloseIdleRawConns(st)
	}
}

// Errors come back as minio-go's, mapped as for every other request.
func TestRangedGetOfAMissingKeyIsNotExist(t *testing.T) {
	st, _ := rawStore(t, 10)
	if _, err := st.Get(t.Context(), "missing", store.AnyVersion, 0, 5); !errors.Is(err, store.ErrNotExist) {
		t.Fatalf("GET of a missing key: %v, want ErrNotExist", err)
	}
	if n := s3store.IdleRawConns(st); n != 0 {
		t.Fatalf("%d kept connections after an error response", n)
	}
}

// Cancelling a GET's context stops a splice that waits for the server.
func TestCancelStopsASplice(t *testing.T) {
	st, _ := rawStore(t, 64<<20)
	ctx, cancel := context.WithCancel(t.Context())
	body, err := st.Get(ctx, "obj", store.AnyVersion, 0, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer body.Close()
	cancel()
	// What the socket holds already may still come; then the error.
	if _, err := spliceAll(t, body); !errors.Is(err, context.Canceled) {
		t.Fatalf("splice after cancel: %v, want context.Canceled", err)
	}
}

// HTTPS bodies are decrypted in user space: no splicing there.
func TestHTTPSEndpointsDoNotSplice(t *testing.T) {
	st, err := s3store.New(s3store.Config{Endpoint: "https://s3.example.com", Region: "us-east-1"}, "b")
	if err != nil {
		t.Fatal(err)
	}
	if st.Splices() {
		t.Fatal("an HTTPS store claims to splice")
	}
}

// A ranged GET's answer larger than the 10 MiB a response header may
// take arrives whole however it is framed: chunked, which net/http's
// reader parses, and with "Connection: close" (versitygw's every answer),
// whose Content-Length body still splices. (A stand-in server: the
// framing is the point; versitygw in the fusefs suite is the real one.)
func TestRangedGetOfEveryFraming(t *testing.T) {
	data := make([]byte, 11<<20)
	rand.Read(data)
	for _, framing := range []string{"chunked", "close"} {
		t.Run(framing, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Range", fmt.Sprintf("bytes 0-%d/%d", len(data)-1, len(data)))
				w.Header().Set("Last-Modified", time.Now().UTC().Format(http.TimeFormat))
				w.Header().Set("ETag", `"e"`)
				if framing == "close" {
					w.Header().Set("Connection", "close")
					w.Header().Set("Content-Length", strconv.Itoa(len(data)))
				}
				w.WriteHeader(http.StatusPartialContent)
				w.(http.Flusher).Flush() // without a Content-Length: chunked
				w.Write(data)
			}))
			defer srv.Close()
			keys := &s3store.Keys{AccessKeyID: "k", SecretAccessKey: "secret"}
			st, err := s3store.New(s3store.Config{Endpoint: srv.URL, Region: "us-east-1", PathStyle: true, Keys: keys, MaxRetries: 1}, "bkt")
			if err != nil {
				t.Fatal(err)
			}
			body, err := st.Get(t.Context(), "obj", store.AnyVersion, 0, int64(len(data)))
			if err != nil {
				t.Fatal(err)
			}
			defer body.Close()
			var got []byte
			if framing == "close" {
				got, err = spliceAll(t, body)
			} else {
				got, err = io.ReadAll(body)
			}
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("got %d of %d bytes, %v", len(got), len(data), err)
			}
			body.Close()
			if n := s3store.IdleRawConns(st); n != 0 {
				t.Errorf("%d connections kept after an answer that closes its connection", n)
			}
		})
	}
}

// A server or proxy that ignores the Range header answers a ranged GET
// with the whole object (200). Its first bytes must not pass for the
// range's, on either path: the spliced one (plain HTTP) and minio-go's
// (HTTPS). A range from byte 0 is the object's first bytes: that answer
// is cut to the range.
func TestRangeIgnoredIsNotTheRange(t *testing.T) {
	data := make([]byte, 64<<10)
	rand.Read(data)
	whole := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Last-Modified", time.Now().UTC().Format(http.TimeFormat))
		w.Header().Set("ETag", `"e"`)
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		w.Write(data) // 200, whatever the Range
	})
	for _, secure := range []bool{false, true} {
		t.Run(map[bool]string{false: "http", true: "https"}[secure], func(t *testing.T) {
			cfg := s3store.Config{Region: "us-east-1", PathStyle: true, MaxRetries: 1,
				Keys: &s3store.Keys{AccessKeyID: "k", SecretAccessKey: "secret"}}
			if secure {
				srv := httptest.NewTLSServer(whole)
				defer srv.Close()
				cfg.Endpoint = srv.URL
				cfg.CABundle = filepath.Join(t.TempDir(), "ca.pem")
				pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
				if err := os.WriteFile(cfg.CABundle, pemBytes, 0o600); err != nil {
					t.Fatal(err)
				}
			} else {
				srv := httptest.NewServer(whole)
				defer srv.Close()
				cfg.Endpoint = srv.URL
			}
			st, err := s3store.New(cfg, "bkt")
			if err != nil {
				t.Fatal(err)
			}
			if st.Splices() == secure {
				t.Fatalf("splices: %v over %s", st.Splices(), cfg.Endpoint)
			}
			if body, err := st.Get(t.Context(), "obj", store.AnyVersion, 100, 10); err == nil {
				got, _ := io.ReadAll(body)
				body.Close()
				t.Fatalf("a range from byte 100 answered with the whole object read %q, want an error", got[:min(len(got), 16)])
			} else if !strings.Contains(err.Error(), "Range header was ignored") {
				t.Fatalf("error %q does not say the range was ignored", err)
			}
			body, err := st.Get(t.Context(), "obj", store.AnyVersion, 0, 10)
			if err != nil {
				t.Fatal(err)
			}
			defer body.Close()
			if got, err := io.ReadAll(body); err != nil || !bytes.Equal(got, data[:10]) {
				t.Fatalf("a range of 10 bytes from 0 read %d bytes (%v), want the object's first 10", len(got), err)
			}
		})
	}
}

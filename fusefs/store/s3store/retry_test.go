package s3store_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/objfuse/objfuse/fusefs/store"
	"github.com/objfuse/objfuse/fusefs/store/s3store"
	"github.com/objfuse/objfuse/test/miniotest"
)

// An upload whose caller gives it a deadline outlasts a server that is
// down for a while, in one request or in parts; without a deadline it
// fails after the client's own retries, for its writer to hear of.
func TestUploadsRetryAnOutageUntilTheirDeadline(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	cfg := srv.Config()
	cfg.PartSize = 5 << 20
	st, err := s3store.New(cfg, bucket)
	if err != nil {
		t.Fatal(err)
	}
	small := bytes.Repeat([]byte("s"), 4096)
	large := bytes.Repeat([]byte("0123456789abcdef"), (11<<20)/16) // three parts

	srv.Stop()
	start := time.Now()
	if _, err := st.Put(context.Background(), "no-deadline", bytes.NewReader(small), int64(len(small)), nil); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("put without a deadline, server down: %v", err)
	}
	t.Logf("without a deadline, the put failed after %v", time.Since(start).Round(time.Millisecond))

	// A store of its own, whose problem only these puts can have set.
	st, err = s3store.New(cfg, bucket)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	done := make(chan error, 2)
	for key, body := range map[string][]byte{"small": small, "large": large} {
		go func() {
			_, err := st.Put(ctx, key, bytes.NewReader(body), int64(len(body)), nil)
			done <- err
		}()
	}
	poll(t, 30*time.Second, "a failed try", func() bool { return errors.Is(st.Health().Problem, store.ErrUnavailable) })
	srv.Restart()
	for range 2 {
		if err := <-done; err != nil {
			t.Fatalf("put with a deadline across the outage: %v", err)
		}
	}
	for key, want := range map[string][]byte{"small": small, "large": large} {
		obj, err := srv.Client().GetObject(ctx, bucket, key, minio.GetObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(obj)
		obj.Close()
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s in S3: %d bytes, %v; want %d", key, len(got), err, len(want))
		}
	}
}

// poll calls cond until it holds, failing the test at the deadline.
func poll(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(d); !cond(); <-tick.C {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, d)
		}
	}
}

// A multipart upload whose completion reached S3 but whose reply was
// lost is retried, finds the upload gone (NoSuchUpload), and recognises
// the object as its own: it is stored, and reporting it lost would be a
// false alarm.
func TestCompletionWhoseReplyWasLost(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	var completions, heads atomic.Int32
	cfg, lost := srv.ReplyLosingFront(t, func(r *http.Request) bool {
		if r.Method == http.MethodHead {
			heads.Add(1) // the retry looking for its object
		}
		return r.Method == http.MethodPost && r.URL.Query().Has("uploadId") && completions.Add(1) == 1
	})
	cfg.PartSize = 5 << 20
	st, err := s3store.New(cfg, bucket)
	if err != nil {
		t.Fatal(err)
	}
	body := bytes.Repeat([]byte("0123456789abcdef"), (11<<20)/16)
	o, err := st.Put(context.Background(), "large", bytes.NewReader(body), int64(len(body)), nil)
	if err != nil {
		t.Fatalf("put whose completion reply was lost: %v", err)
	}
	if lost.Load() != 1 || completions.Load() < 2 || heads.Load() == 0 {
		t.Fatalf("%d replies lost, %d completions sent, %d objects looked at: the case was not made", lost.Load(), completions.Load(), heads.Load())
	}
	if o.Size != int64(len(body)) || o.ETag == "" {
		t.Fatalf("object %+v", o)
	}
	obj, err := srv.Client().GetObject(context.Background(), bucket, "large", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	if got, err := io.ReadAll(obj); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("stored: %d bytes, %v", len(got), err)
	}
}

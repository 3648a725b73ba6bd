package s3store_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/objfuse/objfuse/fusefs/store"
	"github.com/objfuse/objfuse/fusefs/store/s3store"
	"github.com/objfuse/objfuse/test/miniotest"
)

// A store tells what a person must fix while its requests fail for that
// reason (keys no longer accepted, the bucket deleted, the endpoint
// gone), and forgets it once a request works again; a caller's own
// mistake (a missing key) is nobody's problem.
func TestHealthReportsWhatAPersonMustFix(t *testing.T) {
	srv := miniotest.Start(t)
	ctx := context.Background()
	open := func(t *testing.T, bucket string) *s3store.Store {
		st, err := s3store.New(srv.Config(), bucket)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	expect := func(t *testing.T, st *s3store.Store, kind error, says string) store.Health {
		t.Helper()
		h := st.Health()
		if kind == nil {
			if h.Problem != nil {
				t.Fatalf("problem %v, want none", h.Problem)
			}
			return h
		}
		if !errors.Is(h.Problem, kind) || !strings.Contains(h.Problem.Error(), says) || h.Since.IsZero() {
			t.Fatalf("health %+v, want %v saying %q", h, kind, says)
		}
		return h
	}

	t.Run("missing key is no problem", func(t *testing.T) {
		st := open(t, srv.NewBucket(t))
		if _, err := st.Head(ctx, "absent"); !errors.Is(err, store.ErrNotExist) {
			t.Fatalf("head: %v", err)
		}
		expect(t, st, nil, "")
	})

	t.Run("deleted bucket", func(t *testing.T) {
		bucket := srv.NewBucket(t)
		st := open(t, bucket)
		if err := srv.Client().RemoveBucket(ctx, bucket); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Put(ctx, "f", strings.NewReader("x"), 1, nil); err == nil {
			t.Fatal("put into a deleted bucket worked")
		}
		first := expect(t, st, store.ErrNoBucket, "does not exist")
		if err := srv.Client().MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Put(ctx, "f", strings.NewReader("x"), 1, nil); err != nil {
			t.Fatal(err)
		}
		expect(t, st, nil, "")
		// Gone again soon after: the same problem, from the same start.
		if err := srv.Client().RemoveObject(ctx, bucket, "f", minio.RemoveObjectOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := srv.Client().RemoveBucket(ctx, bucket); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Head(ctx, "f"); err == nil {
			t.Fatal("head in a deleted bucket worked")
		}
		if again := expect(t, st, store.ErrNoBucket, "does not exist"); !again.Since.Equal(first.Since) {
			t.Fatalf("a recurrence started anew at %v, not %v", again.Since, first.Since)
		}
	})

	// Last: it restarts the server.
	t.Run("refused keys, then an unreachable endpoint", func(t *testing.T) {
		st := open(t, srv.NewBucket(t))
		if _, err := st.Put(ctx, "f", strings.NewReader("x"), 1, nil); err != nil {
			t.Fatal(err)
		}
		expect(t, st, nil, "")

		srv.RestartWithCredentials("other-key", "other-secret-key")
		for range 2 {
			if _, err := st.Head(ctx, "f"); !errors.Is(err, store.ErrAccess) {
				t.Fatalf("head with refused keys: %v", err)
			}
		}
		first := expect(t, st, store.ErrAccess, "InvalidAccessKeyId")
		if _, err := st.Head(ctx, "f"); err == nil {
			t.Fatal("head worked with refused keys")
		}
		if again := expect(t, st, store.ErrAccess, "check the credentials"); !again.Since.Equal(first.Since) {
			t.Fatalf("the same problem moved its start from %v to %v", first.Since, again.Since)
		}

		srv.Stop()
		_, err := st.Head(ctx, "f")
		if !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("head with the server stopped: %v", err)
		}
		if h := expect(t, st, store.ErrUnavailable, "cannot reach"); !h.Since.After(first.Since) {
			t.Fatalf("a new problem kept the old start %v", h.Since)
		}

		// Nothing uses the store now: it asks S3 itself, and learns the
		// problem is over.
		srv.RestartWithCredentials(miniotest.AccessKey, miniotest.SecretKey)
		poll(t, 30*time.Second, "the problem cleared by the store's own probe", func() bool { return st.Health().Problem == nil })
	})
}

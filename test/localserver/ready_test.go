package localserver_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/objfuse/objfuse/fusefs/store/s3store"
	"github.com/objfuse/objfuse/test/localserver"
)

// iamLoadingServer answers as MinIO does while its IAM subsystem loads:
// root keys work, other keys get a 503 until notReady requests have come,
// then InvalidAccessKeyId. It counts the requests signed with other keys.
func iamLoadingServer(t *testing.T, notReady int32) (*httptest.Server, *atomic.Int32) {
	var strangers atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/xml")
		if strings.Contains(r.Header.Get("Authorization"), "Credential=root/") {
			w.Write([]byte(`<ListAllMyBucketsResult><Buckets></Buckets></ListAllMyBucketsResult>`))
			return
		}
		if strangers.Add(1) <= notReady {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`<Error><Code>XMinioIAMNotInitialized</Code><Message>IAM sub-system not initialized yet, please try again.</Message></Error>`))
			return
		}
		w.WriteHeader(http.StatusForbidden)
		w.Write([]byte(`<Error><Code>InvalidAccessKeyId</Code><Message>The Access Key Id you provided does not exist in our records.</Message></Error>`))
	}))
	t.Cleanup(srv.Close)
	return srv, &strangers
}

func clients(t *testing.T, endpoint string) (root, stranger *minio.Client) {
	t.Helper()
	with := func(access, secret string) *minio.Client {
		c, err := s3store.NewClient(s3store.Config{Endpoint: endpoint, Region: "us-east-1", PathStyle: true, MaxRetries: 1,
			Keys: &s3store.Keys{AccessKeyID: access, SecretAccessKey: secret}})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	return with("root", "root-secret"), with(localserver.StrangerAccessKey, localserver.StrangerSecretKey)
}

// A server whose health endpoint would say ready while its IAM loads is
// waited for until it refuses unknown keys as unknown.
func TestWaitServingWaitsForIAM(t *testing.T) {
	srv, strangers := iamLoadingServer(t, 3)
	root, stranger := clients(t, srv.URL)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := localserver.WaitServing(ctx, root, stranger, nil); err != nil {
		t.Fatal(err)
	}
	if n := strangers.Load(); n != 4 {
		t.Fatalf("returned after %d requests with unknown keys; want 4: the first 3 were answered 503", n)
	}
}

// A server that never loads its IAM fails the wait at the deadline, and
// the error says what it answered.
func TestWaitServingSaysWhyNot(t *testing.T) {
	srv, _ := iamLoadingServer(t, 1<<30)
	root, stranger := clients(t, srv.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	err := localserver.WaitServing(ctx, root, stranger, nil)
	if err == nil || !strings.Contains(err.Error(), "not initialized") {
		t.Fatalf("WaitServing on a server whose IAM never loads: %v, want an error naming it", err)
	}
}

// A server that exits while it is waited for ends the wait at once.
func TestWaitServingEndsWhenTheServerExits(t *testing.T) {
	srv, _ := iamLoadingServer(t, 1<<30)
	root, stranger := clients(t, srv.URL)
	exited := make(chan struct{})
	close(exited)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := localserver.WaitServing(ctx, root, stranger, exited); err == nil || !strings.Contains(err.Error(), "exited") {
		t.Fatalf("WaitServing after the server exited: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the wait ran to its deadline")
	}
}
